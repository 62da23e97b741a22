package serve

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"
)

// emptyBackend has no views; the route table does not depend on them.
type emptyBackend struct{}

func (emptyBackend) Views() []ViewInfo         { return nil }
func (emptyBackend) View(string) (View, error) { return nil, ErrUnknownView }
func (emptyBackend) Ready() error              { return nil }

func TestOpenAPIMatchesRoutes(t *testing.T) {
	s, err := New(Config{Backend: emptyBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	err = chi.Walk(s.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op["responses"] == nil {
				t.Errorf("%s %s has no responses", method, path)
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(routes)
	slices.Sort(documented)
	if !slices.Equal(routes, documented) {
		t.Fatalf("routes and openapi.yaml differ:\nroutes:     %v\ndocumented: %v", routes, documented)
	}
}
