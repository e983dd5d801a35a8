package canonjson

import (
	"math"
	"strconv"

	"github.com/toolgate/toolgate/errcode"
)

// AppendNumber appends f formatted as ECMAScript's Number.prototype.toString
// (ECMA-262 §7.1.12.1, Number::toString), which RFC 8785 §3.2.2.3 mandates
// for JSON numbers, and returns the extended slice: the shortest digits that
// round-trip to f; plain notation for 1e-6 <= |f| < 1e21 ("0.000001",
// "295147905179352830000"), exponent notation otherwise ("1e+21", "1e-7",
// "5e-324"); -0 is written "0". NaN and ±Inf have no JSON form: AppendNumber
// then returns dst unchanged and an *errcode.Error with code
// errcode.InvalidArgument. It is safe for concurrent use.
func AppendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, errcode.Errorf(errcode.InvalidArgument, "number %v has no JSON form", f)
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits d1.d2...dk and exponent e, so that
	// f = d1.d2...dk × 10^e; in ECMA-262 terms n = e+1.
	var tmp [32]byte
	sci := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	mark := 0
	for sci[mark] != 'e' {
		mark++
	}
	var dig [24]byte
	digits := append(dig[:0], sci[0])
	if mark > 1 {
		digits = append(digits, sci[2:mark]...) // skip the '.'
	}
	exp := 0
	for _, c := range sci[mark+2:] {
		exp = exp*10 + int(c-'0')
	}
	if sci[mark+1] == '-' {
		exp = -exp
	}
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21: // integer: digits then n-k zeros
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21: // digits with the point inside
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0: // 0.000ddd
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default: // d[.ddd]e±x
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}
