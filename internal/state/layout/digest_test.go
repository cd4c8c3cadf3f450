package layout

import "testing"

func digestOf(pairs ...string) [32]byte {
	d := NewDigest()
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Add([]byte(pairs[i]), []byte(pairs[i+1]))
	}
	return d.Sum()
}

func TestDigestSeesContentOrderAndBoundaries(t *testing.T) {
	base := digestOf("a", "1", "b", "2")
	if digestOf("a", "1", "b", "2") != base {
		t.Fatal("same scan, different digest")
	}
	for name, other := range map[string][32]byte{
		"value changed":    digestOf("a", "1", "b", "3"),
		"order changed":    digestOf("b", "2", "a", "1"),
		"boundary moved":   digestOf("a1", "", "b", "2"),
		"pair missing":     digestOf("a", "1"),
		"empty pair added": digestOf("a", "1", "b", "2", "", ""),
	} {
		if other == base {
			t.Fatalf("%s: digest unchanged", name)
		}
	}
}

func TestPolicyStatsRoundTrip(t *testing.T) {
	s := PolicyStats{Pending: 1, Success: 1 << 40, Failure: 7}
	got, err := DecodeStats(EncodeStats(s))
	if err != nil || got != s {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := DecodeStats([]byte{1, 2}); err == nil {
		t.Fatal("short value accepted")
	}
}
