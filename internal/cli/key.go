package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// keyID is what `key` accepts as a principal id or tenant.
var keyID = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

func newKeyCmd() *cobra.Command {
	var id, tenant string
	var scopes []string
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make a new API key and print its auth.api_keys entry",
		Long: `Make a new random API key (tg_ followed by 32 random bytes, base64url) and print it once,
with the auth.api_keys entry to paste into the configuration: the key itself is never stored,
only its SHA-256 (compared in constant time). Clients send the key as
"Authorization: Bearer <key>" or "X-API-Key: <key>". The id is 1-64 characters of letters,
digits and . _ -, starting with a letter or digit; the tenant and scopes are 1-128 characters of
letters, digits and . _ : @ -.`,
		Example: `  toolgate key --id alice --tenant acme --scope fs:read --scope web:read`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !config.ValidIdent(id) {
				return usage("--id %q: 1-64 characters of letters, digits and . _ -, starting with a letter or digit (the rule of auth.api_keys[].id)", id)
			}
			if !keyID.MatchString(tenant) {
				return usage("--tenant %q: 1-128 characters of letters, digits and . _ : @ -", tenant)
			}
			for _, s := range scopes {
				if !keyID.MatchString(s) {
					return usage("--scope %q: 1-128 characters of letters, digits and . _ : @ -", s)
				}
			}
			key, err := auth.NewKey()
			if err != nil {
				return failure("making a key: %v", err)
			}
			quoted := make([]string, len(scopes))
			for i, s := range scopes {
				quoted[i] = strconv.Quote(s)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "API key (shown once): %s\n\n", key)
			fmt.Fprintln(out, "auth:\n  api_keys:")
			fmt.Fprintf(out, "    - {id: %s, key_sha256: %s, tenant: %s, scopes: [%s]}\n",
				strconv.Quote(id), strconv.Quote(auth.HashKey(key)), strconv.Quote(tenant), strings.Join(quoted, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&id, "id", "agent", "the principal id calls are attributed to")
	f.StringVar(&tenant, "tenant", "default", "the principal's tenant")
	f.StringArrayVar(&scopes, "scope", nil, "a scope the principal holds (repeatable)")
	return cmd
}
