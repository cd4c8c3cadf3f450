package requestid

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"abc-123":                true,
		New():                    true,
		"":                       false,
		"has space":              false,
		"new\nline":              false,
		"tab\tx":                 false,
		"ünïcode":                false,
		strings.Repeat("a", 128): true,
		strings.Repeat("a", 129): false,
		"k=v\"quoted\"":          true, // visible ASCII; slog quotes it
	} {
		if Valid(id) != want {
			t.Errorf("Valid(%q) = %v, want %v", id, !want, want)
		}
	}
	if New() == New() {
		t.Error("two fresh ids are equal")
	}
}

func TestIncomingMetadata(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "req-7"))
	if got := FromIncoming(ctx); got != "req-7" {
		t.Fatalf("FromIncoming = %q", got)
	}
	bad := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "two words"))
	if got := FromIncoming(bad); got != "" {
		t.Fatalf("invalid id accepted: %q", got)
	}
	if got := FromIncoming(context.Background()); got != "" {
		t.Fatalf("no metadata gave %q", got)
	}
	out := outgoing(With(context.Background(), "req-8"))
	md, _ := metadata.FromOutgoingContext(out)
	if v := md.Get(MetadataKey); len(v) != 1 || v[0] != "req-8" {
		t.Fatalf("outgoing metadata %v", md)
	}
}
