package coordinator

import (
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
)

// digestHandler serves GET /debug/state-digest (wire.StateDigest). A dump is linear in the size of the
// store, so one is computed at a time; a request meanwhile gets 429.
func digestHandler(nodeID string, store *state.Store) http.Handler {
	busy := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		select {
		case busy <- struct{}{}:
			defer func() { <-busy }()
		default:
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(wire.Error{Error: "a state digest is being computed; retry", Code: errcode.JSONUnavailable})
			return
		}
		applied, sum := store.Digest()
		_ = json.NewEncoder(w).Encode(wire.StateDigest{NodeID: nodeID, AppliedIndex: applied, SHA256: hex.EncodeToString(sum[:])})
	})
}
