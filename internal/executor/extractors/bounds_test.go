package extractors

import (
	"testing"

	"github.com/indexify-go/indexify/internal/state"
)

// The chunker's cap is the coordinator's bound on children per content:
// a chunker allowed more would see its results refused by the FSM.
func TestMaxChunksIsTheCoordinatorsBound(t *testing.T) {
	if MaxChunks != state.MaxChildrenPerContent {
		t.Fatalf("MaxChunks %d != state.MaxChildrenPerContent %d", MaxChunks, state.MaxChildrenPerContent)
	}
}
