package cli

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/receipt"
)

// A keys file holds PEM blocks, "CHAIN_ID KEY" lines or bare keys; a
// line whose chain id is not its key's is refused with its line number.
func TestReadKeys(t *testing.T) {
	var pubs []ed25519.PublicKey
	for _, n := range []byte{1, 2, 3} {
		pubs = append(pubs, ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, 32)).Public().(ed25519.PublicKey))
	}
	b64 := base64.StdEncoding.EncodeToString
	for name, tc := range map[string]struct {
		text string
		want []ed25519.PublicKey
		err  string
	}{
		"lines": {text: "# replicas\n" + receipt.KeyID(pubs[0]) + " " + b64(pubs[0]) + "\n\n" + receipt.KeyID(pubs[1]) + " " + b64(pubs[1]) + "\n" + hex.EncodeToString(pubs[2]) + "\n",
			want: pubs},
		"pem": {text: "chain a\n" + string(receipt.EncodePublicKey(pubs[0])) + string(receipt.EncodePublicKey(pubs[2])), want: []ed25519.PublicKey{pubs[0], pubs[2]}},
		"wrong chain id": {text: receipt.KeyID(pubs[0]) + " " + b64(pubs[0]) + "\n" + receipt.KeyID(pubs[0]) + " " + b64(pubs[1]) + "\n",
			err: "line 2: the key's chain id is " + receipt.KeyID(pubs[1])},
		"three fields": {text: "a b c\n", err: "line 1: want"},
		"not a key":    {text: "ed25519:00 notakey\n", err: "line 1: invalid_argument: receipt: not an Ed25519 public key"},
		"empty":        {text: "# nothing\n", err: "no key"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readKeys(writeFile(t, "k", tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("%d keys, %v; want %d", len(got), err, len(tc.want))
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Fatalf("key %d differs", i)
				}
			}
		})
	}
}
