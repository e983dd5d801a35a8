package policy

import (
	"context"
	"errors"
	"testing"
)

// FuzzParse feeds arbitrary documents to the loader and compiler: they
// never panic, and either compile to a Program that decides without
// panicking (its warnings located) or report Issues, every one located
// at line and column ≥ 1.
// Seeds: testdata/fuzz/FuzzParse (including the DESIGN.md example policy).
func FuzzParse(f *testing.F) {
	f.Add([]byte("default: allow\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		prg, err := Load("fuzz.yaml", data, Options{CostLimit: 1000})
		if err != nil {
			var is Issues
			if !errors.As(err, &is) {
				t.Fatalf("Load error is %T, not Issues: %v", err, err)
			}
			if len(is) == 0 {
				t.Fatal("empty Issues")
			}
			for _, i := range is {
				if i.Pos.Line < 1 || i.Pos.Col < 1 || i.Pos.File != "fuzz.yaml" || i.Message == "" {
					t.Fatalf("issue without a position: %+v", i)
				}
			}
			return
		}
		for _, w := range prg.Warnings() {
			if w.Pos.Line < 1 || w.Pos.Col < 1 || w.Pos.File != "fuzz.yaml" || w.Message == "" {
				t.Fatalf("warning without a position: %+v", w)
			}
		}
		in := &Input{
			Principal: Principal{ID: "p", Tenant: "t", Scopes: []string{"fs:read"}, Attributes: map[string]string{"team": "x"}},
			Tool:      Tool{ID: "mcp:fs.read_file", SafetyTier: "read"},
			Args:      map[string]any{"path": "/etc/passwd", "content": "x", "n": 1.0},
			ArgsKnown: true,
		}
		ctx := context.Background()
		d := prg.Decide(ctx, in)
		if !d.Effect.Valid() || (d.Err != nil && d.Effect != EffectDeny) {
			t.Fatalf("decision %+v", d)
		}
		if prg.Disclose(ctx, in) == false && d.Effect != EffectDeny {
			t.Fatalf("not disclosed but %s", d.Effect)
		}
		prg.Explain(ctx, in)
		prg.RateLimit(in.Tool.ID)
	})
}
