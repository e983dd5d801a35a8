package cli

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"github.com/toolgate/toolgate/receipt"
)

// maxKeysFile bounds a keys file (a few thousand keys).
const maxKeysFile = 1 << 20

// readKeys reads the public keys of a keys file (--pubkey, --keys), in any
// of these forms:
//
//   - one or more PEM "PUBLIC KEY" blocks (what 'receipts pubkey --local'
//     prints), text around them ignored;
//   - lines "CHAIN_ID KEY" (what 'receipts pubkey --config' prints): the
//     chain id (receipt.KeyID) and the raw 32-byte Ed25519 key in base64
//     or hex; the chain id must be the key's id;
//   - lines with a key alone (base64 or hex).
//
// Blank lines and lines starting with '#' are skipped. Errors name the
// file and the line.
func readKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading public keys: %w", err)
	}
	if len(data) > maxKeysFile {
		return nil, fmt.Errorf("public keys %s: larger than %d bytes", path, maxKeysFile)
	}
	var keys []ed25519.PublicKey
	if bytes.Contains(data, []byte("-----BEGIN")) {
		for rest := data; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			pub, err := receipt.ParsePublicKey(pem.EncodeToMemory(block))
			if err != nil {
				return nil, fmt.Errorf("public keys %s: %v", path, err)
			}
			keys = append(keys, pub)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("public keys %s: no PEM PUBLIC KEY block", path)
		}
		return keys, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) > 2 {
			return nil, fmt.Errorf("public keys %s line %d: want \"CHAIN_ID KEY\" or a key", path, n)
		}
		pub, err := receipt.ParsePublicKey([]byte(f[len(f)-1]))
		if err != nil {
			return nil, fmt.Errorf("public keys %s line %d: %v", path, n, err)
		}
		if len(f) == 2 && receipt.KeyID(pub) != f[0] {
			return nil, fmt.Errorf("public keys %s line %d: the key's chain id is %s, not %s", path, n, receipt.KeyID(pub), f[0])
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("public keys %s: no key", path)
	}
	return keys, nil
}
