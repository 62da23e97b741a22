package serve

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's OpenAPI 3 description; a test checks that its paths and methods are
// exactly the router's.
//
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 description of the API (YAML), also served at
// /v1/openapi.yaml.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPI)
}
