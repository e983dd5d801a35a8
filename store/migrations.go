package store

import (
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/errcode"
)

// Migration is one numbered schema step of a SQL backend, read from a file
// migrations/NNNN_name.sql: Version NNNN (> 0), Name "NNNN_name", SQL the
// file's text.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads every migrations/NNNN_name.sql of fsys (the
// backend's embedded files), sorted by version. Errors: errcode.Internal
// for a file not named NNNN_name.sql, a version used twice, or a read
// failure. Safe for concurrent use (it only reads fsys).
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "load migrations")
	}
	var ms []Migration
	for _, n := range names {
		base := path.Base(n)
		num, rest, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == "" {
			return nil, errcode.Errorf(errcode.Internal, "load migrations: %s is not named NNNN_name.sql", base)
		}
		body, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "load migrations")
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, errcode.Errorf(errcode.Internal, "load migrations: version %d is used twice", ms[i].Version)
		}
	}
	return ms, nil
}
