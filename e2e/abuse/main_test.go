package abuse

import (
	"testing"

	"github.com/pibgw/pibgw/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
