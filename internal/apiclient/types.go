package apiclient

import "github.com/indexify-go/indexify/internal/wire"

// The JSON shapes are the API server's own (internal/wire), so a change of
// shape on either side fails to compile instead of drifting. Values of
// labels, params and extracted metadata stay raw JSON so nothing is lost
// when the CLI prints them back out.
type (
	Namespace     = wire.Namespace
	Policy        = wire.Policy
	Graph         = wire.Graph
	Content       = wire.Content
	Task          = wire.Task
	Executor      = wire.Executor
	Member        = wire.Member
	ClusterStatus = wire.ClusterStatus
)
