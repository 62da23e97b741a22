package pgjson

import (
	"encoding/json"
	"errors"
	"testing"
)

var (
	textT  = &Type{Name: "text", Kind: String}
	intT   = &Type{Name: "int4", Kind: Integer}
	numT   = &Type{Name: "numeric", Kind: Decimal}
	byteaT = &Type{Name: "bytea", Kind: Bytes}
	jsonT  = &Type{Name: "jsonb", Kind: JSON}
)

func TestAppend(t *testing.T) {
	tests := []struct {
		typ  *Type
		in   string
		want string
	}{
		{&Type{Kind: Bool}, "t", `true`},
		{&Type{Kind: Bool}, "f", `false`},
		{intT, "-42", `-42`},
		{numT, "12345678901234567890.000000000000000001", `12345678901234567890.000000000000000001`},
		{numT, "NaN", `"NaN"`},
		{&Type{Kind: Decimal}, "-Infinity", `"-Infinity"`},
		{&Type{Kind: Decimal}, "1e+100", `1e+100`},
		{textT, "a\"b\\c\n\x01é", `"a\"b\\c\n\u0001é"`},
		{textT, "bad\xffutf8", `"bad\ufffdutf8"`},
		{byteaT, `\x00ff10`, `"AP8Q"`},
		{byteaT, `\x`, `""`},
		{jsonT, `{"a": [1, 2.50, null]}`, `{"a": [1, 2.50, null]}`},
		{&Type{Kind: Timestamptz}, "2024-05-01 10:00:00.5+00", `"2024-05-01T10:00:00.5Z"`},
		{&Type{Kind: Timestamptz}, "2024-05-01 10:00:00+05:30", `"2024-05-01T10:00:00+05:30"`},
		{&Type{Kind: Timestamptz}, "infinity", `"infinity"`},
		{&Type{Kind: Timestamptz}, "0044-03-15 12:00:00+00 BC", `"0044-03-15 12:00:00+00 BC"`},
		{&Type{Kind: Timestamp}, "2024-05-01 10:00:00.000123", `"2024-05-01T10:00:00.000123"`},
		{&Type{Kind: Array, Elem: intT}, "{1,2,NULL}", `[1,2,null]`},
		{&Type{Kind: Array, Elem: intT}, "{}", `[]`},
		{&Type{Kind: Array, Elem: intT}, "{{1,2},{3,4}}", `[[1,2],[3,4]]`},
		{&Type{Kind: Array, Elem: textT}, `{"a,b","say \"hi\"",NULL,"NULL",plain}`, `["a,b","say \"hi\"",null,"NULL","plain"]`},
		{&Type{Kind: Array, Elem: byteaT}, `{"\\x01"}`, `["AQ=="]`},
		{&Type{Kind: Array, Elem: jsonT}, `{"{\"k\": 1}"}`, `[{"k": 1}]`},
		{&Type{Kind: Array, Elem: intT}, "[0:1]={1,2}", `"[0:1]={1,2}"`},
		{&Type{Kind: Array, Elem: textT, Delim: ';'}, "{(1,1),(0,0);(2,2),(1,1)}", `["(1,1),(0,0)","(2,2),(1,1)"]`},
	}
	for _, tt := range tests {
		got, err := tt.typ.Append(nil, []byte(tt.in))
		if err != nil {
			t.Errorf("Append(%s, %q): %v", tt.typ.Name, tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Append(%s, %q) = %s, want %s", tt.typ.Name, tt.in, got, tt.want)
		}
	}
}

func TestAppendMalformed(t *testing.T) {
	tests := []struct {
		typ *Type
		in  string
	}{
		{&Type{Kind: Bool}, "yes"},
		{intT, "12a"},
		{numT, "Infinity "},
		{byteaT, `0102`},
		{byteaT, `\x0g`},
		{jsonT, `{"a":`},
		{&Type{Kind: Array, Elem: intT}, "{1,2"},
		{&Type{Kind: Array, Elem: intT}, "{1,,2}"},
		{&Type{Kind: Array, Elem: intT}, "{1}x"},
		{&Type{Kind: Array, Elem: textT}, `{"abc}`},
		{&Type{Kind: Array}, "{1}"},
	}
	for _, tt := range tests {
		if got, err := tt.typ.Append(nil, []byte(tt.in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Append(%s, %q) = %s, %v; want ErrMalformed", tt.typ.Name, tt.in, got, err)
		}
	}
}

// FuzzAppend checks that whatever the input, the output is valid JSON or an ErrMalformed.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"{1,2}", `{"a\\"b",NULL}`, "{{1},{2}}", `\x00ff`, "12.5", "t", "2024-01-01 00:00:00+00"} {
		f.Add(s)
	}
	types := []*Type{
		textT, intT, numT, byteaT, jsonT, {Kind: Bool}, {Kind: Timestamptz}, {Kind: Timestamp},
		{Kind: Array, Elem: intT}, {Kind: Array, Elem: textT}, {Kind: Array, Elem: byteaT}, {Kind: Array, Elem: numT},
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, typ := range types {
			out, err := typ.Append(nil, []byte(in))
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("kind %d: error %v is not ErrMalformed", typ.Kind, err)
				}
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("kind %d: %q gave invalid JSON %q", typ.Kind, in, out)
			}
		}
	})
}
