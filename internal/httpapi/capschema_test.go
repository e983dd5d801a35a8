package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/internal/schematest"
)

// capabilities.schema.json cannot be compiled by internal/schematest: its
// `prompts` block refers to prompt-ref.schema.json and
// prompt-kind.schema.json, which are not among the vendored schemas. The
// discovery document never carries `prompts`, so CheckCapabilities compiles
// the vendored capabilities schema with those two documents (and only
// those) stubbed as the empty schema; every property toolgate emits is
// still validated by the unmodified vendored schema.

var capSchema struct {
	once sync.Once
	s    *jsonschema.Schema
	err  error
}

// stubbed are the unvendored documents capabilities.schema.json refers to.
var stubbed = map[string]bool{
	"https://openwop.dev/spec/v1/prompt-ref.schema.json":  true,
	"https://openwop.dev/spec/v1/prompt-kind.schema.json": true,
}

type stubLoader struct{}

func (stubLoader) Load(url string) (any, error) {
	if stubbed[url] {
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("schema %s is neither vendored nor stubbed", url)
}

// CheckCapabilities validates a discovery document against the vendored
// capabilities.schema.json (see above). Exported for this package's
// external tests.
func CheckCapabilities(doc []byte) error {
	capSchema.once.Do(func() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		c.UseLoader(stubLoader{})
		entries, err := os.ReadDir(schematest.Dir())
		if err != nil {
			capSchema.err = err
			return
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(schematest.Dir(), e.Name()))
			if err != nil {
				capSchema.err = err
				return
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				capSchema.err = err
				return
			}
			var id struct {
				ID string `json:"$id"`
			}
			json.Unmarshal(raw, &id)
			if id.ID != "" {
				if err := c.AddResource(id.ID, v); err != nil {
					capSchema.err = err
					return
				}
			}
		}
		capSchema.s, capSchema.err = c.Compile("https://openwop.dev/spec/v1/capabilities.schema.json")
	})
	if capSchema.err != nil {
		return capSchema.err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return capSchema.s.Validate(v)
}
