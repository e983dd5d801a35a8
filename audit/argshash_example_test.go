package audit_test

import (
	"fmt"

	"github.com/toolgate/toolgate/audit"
)

func ExampleArgsHash() {
	h, err := audit.ArgsHash([]byte(`{"q":"openwop"}`))
	fmt.Println(h, err)
	// Output: 9458af8c77ede919beb4dd201de70ea7909225488c9e925190a9b4e585cb9d6f <nil>
}

func ExampleRedactor() {
	r := audit.NewRedactor()
	r.AddSecret("gh-token", "s3cr3t-resolved-value") // registered when the credential is resolved

	out, _ := r.RedactJSON([]byte(`{"q":"token s3cr3t-resolved-value","password":"hunter2","n":1.50}`))
	fmt.Println(string(out))
	fmt.Println(r.RedactString("upstream said: Bearer abcdefghijkl (s3cr3t-resolved-value)"))
	// Output:
	// {"n":1.5,"password":"[redacted]","q":"token [REDACTED:gh-token]"}
	// upstream said: Bearer [redacted] ([REDACTED:gh-token])
}
