package pgjson

import "fmt"

// appendArray converts an array literal as array_out prints it: '{' elements '}', elements
// separated by the type's delimiter, each either NULL, a nested array, a double-quoted string
// with backslash escapes, or a bare word. Arrays with explicit bounds ("[0:1]={...}") have no
// JSON form that keeps the bounds, so they are kept as the Postgres text.
func (t *Type) appendArray(dst, text []byte) ([]byte, error) {
	if len(text) > 0 && text[0] == '[' {
		return AppendString(dst, text), nil
	}
	if t.Elem == nil {
		return dst, fmt.Errorf("%w: array type %s has no element type", ErrMalformed, t.Name)
	}
	p := arrayParser{text: text, elem: t.Elem, delim: t.Delim}
	if p.delim == 0 {
		p.delim = ','
	}
	out, err := p.array(dst, 0)
	if err != nil {
		return dst, err
	}
	if p.pos != len(text) {
		return dst, fmt.Errorf("%w: %s: trailing text after array", ErrMalformed, t.Name)
	}
	return out, nil
}

// maxArrayDepth is Postgres's MAXDIM.
const maxArrayDepth = 6

type arrayParser struct {
	text  []byte
	pos   int
	elem  *Type
	delim byte
	buf   []byte
}

func (p *arrayParser) fail(what string) error {
	return fmt.Errorf("%w: array %s at byte %d", ErrMalformed, what, p.pos)
}

func (p *arrayParser) array(dst []byte, depth int) ([]byte, error) {
	if depth >= maxArrayDepth {
		return dst, p.fail("nested too deeply")
	}
	if p.pos >= len(p.text) || p.text[p.pos] != '{' {
		return dst, p.fail("does not start with '{'")
	}
	p.pos++
	dst = append(dst, '[')
	if p.pos < len(p.text) && p.text[p.pos] == '}' {
		p.pos++
		return append(dst, ']'), nil
	}
	for {
		var err error
		if dst, err = p.element(dst, depth); err != nil {
			return dst, err
		}
		if p.pos >= len(p.text) {
			return dst, p.fail("is not closed")
		}
		switch p.text[p.pos] {
		case '}':
			p.pos++
			return append(dst, ']'), nil
		case p.delim:
			p.pos++
			dst = append(dst, ',')
		default:
			return dst, p.fail("has an unexpected character")
		}
	}
}

func (p *arrayParser) element(dst []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.text) {
		return dst, p.fail("ends inside an element")
	}
	switch p.text[p.pos] {
	case '{':
		return p.array(dst, depth+1)
	case '"':
		s, err := p.quoted()
		if err != nil {
			return dst, err
		}
		return p.elem.Append(dst, s)
	}
	start := p.pos
	for p.pos < len(p.text) && p.text[p.pos] != p.delim && p.text[p.pos] != '}' {
		if c := p.text[p.pos]; c == '{' || c == '"' || c == '\\' {
			return dst, p.fail("has a special character in a bare element")
		}
		p.pos++
	}
	word := p.text[start:p.pos]
	if len(word) == 0 {
		return dst, p.fail("has an empty element")
	}
	if isNull(word) {
		return append(dst, "null"...), nil
	}
	return p.elem.Append(dst, word)
}

func isNull(w []byte) bool {
	return len(w) == 4 && (w[0]|0x20) == 'n' && (w[1]|0x20) == 'u' && (w[2]|0x20) == 'l' && (w[3]|0x20) == 'l'
}

func (p *arrayParser) quoted() ([]byte, error) {
	p.pos++ // opening quote
	p.buf = p.buf[:0]
	for p.pos < len(p.text) {
		c := p.text[p.pos]
		switch c {
		case '"':
			p.pos++
			return p.buf, nil
		case '\\':
			p.pos++
			if p.pos >= len(p.text) {
				return nil, p.fail("ends in an escape")
			}
			c = p.text[p.pos]
		}
		p.buf = append(p.buf, c)
		p.pos++
	}
	return nil, p.fail("has an unterminated quoted element")
}
