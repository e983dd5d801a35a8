package audit

import (
	"bytes"
	"encoding/json"
)

// CallSecretID is the secretId of the values WithValues registers for one
// call: they are redacted as "[REDACTED:argument]".
const CallSecretID = "argument"

// WithValues returns a call-scoped Redactor: it applies every rule of r,
// with r's registered secrets as they are at each redaction (secrets
// registered on r later count too), and also redacts each of values
// (those of at least MinSecretLen bytes) as a registered secret of
// secretID. It registers nothing on r. With no value long enough it
// returns r itself. AddSecret on the returned Redactor registers on it
// alone. Use it to scrub what one call writes (its error messages, result
// and log lines) of the values its arguments' redaction removed
// (ArgsHashRemoved). Safe for concurrent use.
func (r *Redactor) WithValues(secretID string, values []string) *Redactor {
	var child *Redactor
	for _, v := range values {
		if len(v) < MinSecretLen {
			continue
		}
		if child == nil {
			child = &Redactor{parent: r}
			child.snap.Store(emptySnapshot)
		}
		child.AddSecret(secretID, v)
	}
	if child == nil {
		return r
	}
	return child
}

// ArgsHashRemoved is ArgsHashDecode (with decode; ArgsHash without it, obj
// then nil) that also returns the values the key-name rule removed from
// args: every string, number (as written) and object key inside the value
// of a member whose key names a credential, in no particular order. A caller registers them for the call's outcome (WithValues), so
// that an upstream that echoes a redacted argument in its error text or
// result does not get it into the audit record. removed is nil when the
// key-name rule removed nothing (the common case costs one scan of the
// canonical form). Errors: those of ArgsHash. Safe for concurrent use.
func (r *Redactor) ArgsHashRemoved(args []byte, decode bool) (hash string, obj map[string]any, removed []string, err error) {
	bp := hashBufPool.Get().(*[]byte)
	buf, v, err := r.appendRedacted((*bp)[:0], args, true, decode)
	if err != nil {
		hashBufPool.Put(bp)
		return "", nil, nil, err
	}
	hash = hashHex(buf)
	// The key-name rule writes the placeholder as a JSON string; without
	// one in the output it removed nothing.
	marked := bytes.Contains(buf, []byte(`"`+RedactedPlaceholder+`"`))
	if cap(buf) <= maxPooledHashBuf {
		*bp = buf[:0]
		hashBufPool.Put(bp)
	}
	if marked {
		removed = keyNameValues(args)
	}
	obj, _ = v.(map[string]any)
	return hash, obj, removed, nil
}

// keyNameValues returns the values the key-name rule removes from the JSON
// text data (see ArgsHashRemoved); nil if it does not parse.
func keyNameValues(data []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []string
	var walk func(v any, removed bool)
	walk = func(v any, removed bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if removed {
					out = append(out, k)
				}
				walk(e, removed || isSensitiveKey([]byte(k)))
			}
		case []any:
			for _, e := range x {
				walk(e, removed)
			}
		case string:
			if removed {
				out = append(out, x)
			}
		case json.Number:
			if removed {
				out = append(out, x.String())
			}
		}
	}
	walk(v, false)
	return out
}
