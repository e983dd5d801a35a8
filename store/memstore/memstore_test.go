package memstore_test

import (
	"testing"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
	"github.com/toolgate/toolgate/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
