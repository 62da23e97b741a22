package servebackend_test

import (
	"testing"

	"github.com/tarnhq/tarn/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
