package topics

import (
	"encoding/binary"
	"errors"
)

// MaxJSONDepth is the deepest nesting of arrays and objects a JSON body may
// have: deeper bodies are refused before any parser recurses into them.
const MaxJSONDepth = 1000

// ErrJSONDepth is CheckJSON's error for a body nested deeper than
// MaxJSONDepth.
var ErrJSONDepth = errors.New("nested deeper than 1000 levels")

var errJSONSyntax = errors.New("invalid JSON")

// CheckJSON reports whether b is one JSON value, as encoding/json's Valid
// decides, nested at most MaxJSONDepth deep: nil when it is, ErrJSONDepth
// when b opens more arrays and objects than that before any syntax error,
// else a syntax error. It reads b once, without recursion and without
// allocating, so that untrusted input costs time linear in its size and
// constant memory.
func CheckJSON(b []byte) error {
	// objects holds a bit per open level, set for an object.
	var objects [MaxJSONDepth/64 + 1]uint64
	depth := 0
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return errJSONSyntax
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == MaxJSONDepth {
				return ErrJSONDepth
			}
			if c == '{' {
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' and ']' follow their openers by two
				depth--
				i++
				break
			}
			if c == '{' {
				if i = member(b, i); i < 0 {
					return errJSONSyntax
				}
			}
			continue
		case '"':
			i = stringEnd(b, i+1)
		case 't':
			i = literal(b, i, "true")
		case 'f':
			i = literal(b, i, "false")
		case 'n':
			i = literal(b, i, "null")
		default:
			i = numberEnd(b, i)
		}
		if i < 0 {
			return errJSONSyntax
		}
		// A value ended at i: close the levels it completes, then move to
		// the next element or member.
		for {
			i = skipSpace(b, i)
			if depth == 0 {
				if i != len(b) {
					return errJSONSyntax
				}
				return nil
			}
			if i >= len(b) {
				return errJSONSyntax
			}
			object := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			if c := b[i]; c == ',' {
				i = skipSpace(b, i+1)
				if object {
					if i = member(b, i); i < 0 {
						return errJSONSyntax
					}
				}
				break
			} else if object && c == '}' || !object && c == ']' {
				depth--
				i++
				continue
			}
			return errJSONSyntax
		}
	}
}

// member reads an object member's name and colon at i and returns where
// its value starts, or -1.
func member(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringEnd(b, i+1); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// stringEnd returns the index after the closing quote of the string whose
// contents start at i, or -1.
func stringEnd(b []byte, i int) int {
	for {
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
		default:
			return -1 // a control character
		}
		if i+1 >= len(b) {
			return -1
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
				return -1
			}
			i += 6
		default:
			return -1
		}
	}
}

// special reports whether any of the 8 bytes in x is not plain: a quote,
// a backslash or a control character (a byte below 0x20).
func special(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	return ((x-ones*0x20)&^x|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

// plain marks the bytes a string holds as they are: not a quote, a
// backslash or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// numberEnd returns the index after the number that starts at i, or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b) || !isDigit(b[i]):
		return -1
	case b[i] == '0':
		i++
	default:
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}
