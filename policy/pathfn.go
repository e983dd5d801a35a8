package policy

import (
	"path"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// CEL function names of the path library (issue 13.8).
const (
	fnPathClean   = "path.clean"
	fnPathIsUnder = "path.isUnder"
)

// pathLib declares path.clean(p) and path.isUnder(p, dir[, root]): lexical
// POSIX path functions (Go's path.Clean: "/" is the only separator, "." and
// ".." elements are resolved, repeated slashes collapse). They do not touch
// the file system, so symbolic links are the upstream's to resolve.
func pathLib() cel.EnvOption {
	return cel.Lib(pathLibrary{})
}

type pathLibrary struct{}

// CompileOptions implements cel.Library.
func (pathLibrary) CompileOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function(fnPathClean,
			cel.Overload("path_clean_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(p ref.Val) ref.Val {
					s, ok := p.(types.String)
					if !ok {
						return types.MaybeNoSuchOverloadErr(p)
					}
					return types.String(path.Clean(string(s)))
				}))),
		cel.Function(fnPathIsUnder,
			cel.Overload("path_isUnder_string_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(p, dir ref.Val) ref.Val {
					ps, ok1 := p.(types.String)
					ds, ok2 := dir.(types.String)
					if !ok1 || !ok2 {
						return types.NoSuchOverloadErr()
					}
					return isUnder(string(ps), string(ds), "")
				})),
			cel.Overload("path_isUnder_string_string_string", []*cel.Type{cel.StringType, cel.StringType, cel.StringType}, cel.BoolType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					if len(args) != 3 {
						return types.NoSuchOverloadErr()
					}
					ps, ok1 := args[0].(types.String)
					ds, ok2 := args[1].(types.String)
					rs, ok3 := args[2].(types.String)
					if !ok1 || !ok2 || !ok3 {
						return types.NoSuchOverloadErr()
					}
					if !path.IsAbs(string(rs)) {
						return types.NewErr("path.isUnder: root %q is not an absolute path", string(rs))
					}
					return isUnder(string(ps), string(ds), string(rs))
				}))),
	}
}

// ProgramOptions implements cel.Library.
func (pathLibrary) ProgramOptions() []cel.ProgramOption { return nil }

// isUnder reports whether p, cleaned, is dir or below it. With a root, a
// relative p (and a relative dir) is resolved against root. Without one
// (the two-argument form), a relative p is never under dir: the gateway
// cannot know what the upstream resolves it against (server-filesystem
// uses the directory it serves, which may be dir's parent), so it fails
// closed; and dir must be absolute, an evaluation error otherwise (the
// rule then fails closed too).
func isUnder(p, dir, root string) ref.Val {
	if root == "" {
		if !path.IsAbs(dir) {
			return types.NewErr("path.isUnder: dir %q is not an absolute path (give a root: path.isUnder(p, dir, root))", dir)
		}
		if !path.IsAbs(p) {
			return types.False
		}
		root = dir
	}
	if !path.IsAbs(dir) {
		dir = path.Join(root, dir)
	}
	if !path.IsAbs(p) {
		p = path.Join(root, p)
	}
	p, dir = path.Clean(p), path.Clean(dir)
	if p == dir || dir == "/" {
		return types.True
	}
	return types.Bool(strings.HasPrefix(p, dir+"/"))
}

// pathLikeNames are argument names (lower-cased) that suggest a file system
// path; also any name containing one of pathLikeParts.
var (
	pathLikeNames = []string{"src", "dst", "dest", "source", "destination", "cwd", "root", "location", "target"}
	pathLikeParts = []string{"path", "file", "dir", "folder"}
)

func pathLike(name string) bool {
	n := strings.ToLower(name)
	for _, p := range pathLikeParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	for _, p := range pathLikeNames {
		if n == p {
			return true
		}
	}
	return false
}

// argName returns the name of the args field e selects (args.path,
// args["path"], args.opts.file: the last name), if e reads args.
func argName(e ast.Expr) (string, bool) {
	var name string
	for first := true; ; first = false {
		switch e.Kind() {
		case ast.SelectKind:
			s := e.AsSelect()
			if first {
				name = s.FieldName()
			}
			e = s.Operand()
		case ast.CallKind:
			c := e.AsCall()
			if c.FunctionName() != "_[_]" || len(c.Args()) != 2 {
				return "", false
			}
			if first {
				k := c.Args()[1]
				if k.Kind() != ast.LiteralKind {
					return "", false
				}
				s, ok := k.AsLiteral().(types.String)
				if !ok {
					return "", false
				}
				name = string(s)
			}
			e = c.Args()[0]
		case ast.IdentKind:
			return name, e.AsIdent() == "args" && name != ""
		default:
			return "", false
		}
	}
}

// finding is a located message about a condition: line 1-based, col
// 0-based within the expression.
type finding struct {
	line, col int
	msg       string
}

// pathChecks walks a checked condition for path misuse: startsWith on an
// argument whose name looks like a path (a warning: `..` escapes it), and
// path.isUnder with a constant dir that is not absolute and no root, or a
// constant root that is not absolute (an issue: it fails for every call).
func pathChecks(a *cel.Ast) (warnings, issues []finding) {
	seen := map[string]bool{}
	info := a.NativeRep().SourceInfo()
	at := func(e ast.Expr, msg string) finding {
		loc := info.GetStartLocation(e.ID())
		return finding{line: loc.Line(), col: loc.Column(), msg: msg}
	}
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		switch c.FunctionName() {
		case "startsWith":
			if !c.IsMemberFunction() {
				return
			}
			if name, ok := argName(c.Target()); ok && pathLike(name) && !seen[name] {
				seen[name] = true
				warnings = append(warnings, at(c.Target(), "args."+name+".startsWith(…) can be escaped with \"..\" (\"/srv/data/../etc/passwd\" starts with \"/srv/data\"); use path.isUnder(args."+name+", dir)"))
			}
		case fnPathIsUnder:
			args := c.Args()
			constStr := func(i int) (string, bool) {
				if i >= len(args) || args[i].Kind() != ast.LiteralKind {
					return "", false
				}
				s, ok := args[i].AsLiteral().(types.String)
				return string(s), ok
			}
			if len(args) == 2 {
				if d, ok := constStr(1); ok && !path.IsAbs(d) {
					issues = append(issues, at(args[1], "path.isUnder: dir \""+d+"\" is not an absolute path; give a root: path.isUnder(p, dir, root)"))
				}
			}
			if r, ok := constStr(2); ok && !path.IsAbs(r) {
				issues = append(issues, at(args[2], "path.isUnder: root \""+r+"\" is not an absolute path"))
			}
		}
	}))
	return warnings, issues
}
