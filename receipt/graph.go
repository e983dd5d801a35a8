package receipt

import "slices"

// CallGraph is the nesting of calls rebuilt from receipts' parentCallId
// (DESIGN.md: "nested calls form a verifiable call graph"). Lists are in
// the order the receipts were given (file order for Verify). A CallGraph is
// a plain value; it is not safe to mutate concurrently with readers.
type CallGraph struct {
	// Nodes maps each callId to its node.
	Nodes map[string]*CallNode `json:"nodes"`
	// Roots are the callIds without a parentCallId.
	Roots []string `json:"roots"`
	// Orphans are the callIds whose parentCallId is not in the set (for
	// example a parent on another chain or before the verified suffix).
	Orphans []string `json:"orphans,omitempty"`
	// Cycles lists each parent-link cycle once, as callIds in parent order
	// starting from the first one met. A cycle's nodes are neither roots nor
	// orphans, so no honest gateway produces one.
	Cycles [][]string `json:"cycles,omitempty"`
	// Duplicates are callIds carried by more than one receipt; the node
	// keeps the first.
	Duplicates []string `json:"duplicates,omitempty"`
}

// CallNode is one call of a CallGraph.
type CallNode struct {
	CallID       string   `json:"callId"`
	ParentCallID string   `json:"parentCallId,omitempty"`
	ChainID      string   `json:"chainId"`
	Seq          uint64   `json:"seq"`
	ToolID       string   `json:"toolId"`
	Status       string   `json:"status"`
	Children     []string `json:"children,omitempty"` // callIds, in receipt order
}

// Children returns the callIds of callID's direct children, or nil.
func (g *CallGraph) Children(callID string) []string {
	if n := g.Nodes[callID]; n != nil {
		return n.Children
	}
	return nil
}

// BuildGraph rebuilds the call graph of rs (nil receipts and receipts
// without a callId are skipped). It does not check hashes or signatures;
// Verify builds the graph of the receipts it verified. Safe for concurrent
// use with other readers of rs.
func BuildGraph(rs []*Receipt) *CallGraph {
	var b graphBuilder
	for _, r := range rs {
		if r != nil {
			b.add(r)
		}
	}
	return b.build()
}

type graphBuilder struct {
	g     CallGraph
	order []string
}

func (b *graphBuilder) add(r *Receipt) {
	if r.CallID == "" {
		return
	}
	if b.g.Nodes == nil {
		b.g.Nodes = map[string]*CallNode{}
	}
	if _, dup := b.g.Nodes[r.CallID]; dup {
		if !slices.Contains(b.g.Duplicates, r.CallID) {
			b.g.Duplicates = append(b.g.Duplicates, r.CallID)
		}
		return
	}
	b.g.Nodes[r.CallID] = &CallNode{
		CallID: r.CallID, ParentCallID: r.ParentCallID, ChainID: r.ChainID, Seq: r.Seq,
		ToolID: r.ToolID, Status: r.Status,
	}
	b.order = append(b.order, r.CallID)
}

func (b *graphBuilder) build() *CallGraph {
	g := &b.g
	if g.Nodes == nil {
		g.Nodes = map[string]*CallNode{}
	}
	g.Roots = []string{}
	for _, id := range b.order {
		n := g.Nodes[id]
		switch p := g.Nodes[n.ParentCallID]; {
		case n.ParentCallID == "":
			g.Roots = append(g.Roots, id)
		case p == nil:
			g.Orphans = append(g.Orphans, id)
		default:
			p.Children = append(p.Children, id)
		}
	}
	// Each node has at most one parent, so following parent links from
	// every node finds each cycle exactly once (white/grey/black walk).
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]uint8, len(b.order))
	for _, id := range b.order {
		var path []string
		cur := id
		for color[cur] == white {
			color[cur] = grey
			path = append(path, cur)
			parent := g.Nodes[cur].ParentCallID
			if parent == "" || g.Nodes[parent] == nil {
				cur = "" // the walk ended at a root or an orphan
				break
			}
			cur = parent
		}
		if cur != "" && color[cur] == grey { // back on this walk's path: a cycle
			i := slices.Index(path, cur)
			g.Cycles = append(g.Cycles, slices.Clone(path[i:]))
		}
		for _, p := range path {
			color[p] = black
		}
	}
	return g
}
