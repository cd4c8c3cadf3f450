package k8s

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/indexify-go/indexify/test/harness"
)

const replicas = 3

// TestChart installs the chart once with its defaults (3 coordinators, one
// API server on the claim the chart makes, one executor group) and runs the
// scenarios on that release in order; each builds on what the previous one
// left (the data written), and the first that fails ends the test. Every
// acknowledged upload of the run is remembered: after each scenario that
// replaces pods a sample of them is downloaded byte for byte.
func TestChart(t *testing.T) {
	suiteStart := time.Now()
	// A scaled-away coordinator is removed by the autopilot once it has
	// been unreachable this long (the chart's default is 5m, the backstop
	// for a pod that cannot tell a scale-down from a restart); 60s keeps
	// the scale-down scenario short and is still longer than any pod of
	// the other scenarios stays away.
	sets := []string{"coordinator.autopilot.deadServerThreshold=60s"}
	r := install(t, testValues(t, sets...))
	ready := r.waitReady(t, 5*time.Minute)
	t.Logf("timing: helm install to every pod ready: %s", ready.Round(time.Second))
	s := &suite{top: t, r: r, ns: "k8s", sets: sets}
	s.api = harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))
	names := s.names(replicas)

	ok := t.Run("fresh install: pods Parallel, one cluster forms, an upload is extracted end to end", func(t *testing.T) {
		start := time.Now()
		var sts appsv1.StatefulSet
		if err := getJSON(t, &sts, "-n", r.ns, "statefulset", r.sts()); err != nil {
			t.Fatal(err)
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Fatalf("podManagementPolicy %q", sts.Spec.PodManagementPolicy)
		}
		// Parallel as the controller did it: every pod existed before the
		// first became ready (a coordinator is ready only inside a cluster
		// with a leader, so OrderedReady would never have got past pod 0).
		pods := r.coordinatorPods(t)
		if len(pods) != replicas {
			t.Fatalf("%d coordinator pods", len(pods))
		}
		var lastCreated, firstReady time.Time
		for i := range pods {
			p := &pods[i]
			ok, at := podReady(p)
			if !ok {
				t.Fatalf("%s not ready", p.Name)
			}
			if c := p.CreationTimestamp.Time; c.After(lastCreated) {
				lastCreated = c
			}
			if firstReady.IsZero() || at.Before(firstReady) {
				firstReady = at
			}
		}
		if lastCreated.After(firstReady) {
			t.Fatalf("a pod was created at %s, after the first was ready at %s", lastCreated, firstReady)
		}
		// Each coordinator gave the Go runtime 90% of its container's
		// memory limit, read from the cgroup (internal/memlimit), so the
		// collector works harder near the limit instead of the pod being
		// OOMKilled with garbage on its heap.
		for i := range pods {
			c := pods[i].Spec.Containers[0]
			limit := c.Resources.Limits.Memory().Value()
			if c.Name != "coordinator" || limit == 0 {
				t.Fatalf("%s: container %q with memory limit %d; the chart's defaults set one", pods[i].Name, c.Name, limit)
			}
			out, err := kubectl(30*time.Second, "-n", r.ns, "logs", pods[i].Name, "-c", c.Name)
			if err != nil {
				t.Fatalf("logs of %s: %v", pods[i].Name, err)
			}
			want := fmt.Sprintf(`"container_limit_bytes":%d,"go_limit_bytes":%d`, limit, int64(float64(limit)*0.9))
			if !strings.Contains(out, want) {
				t.Fatalf("%s never logged the Go memory limit (%s); its log starts:\n%.2000s", pods[i].Name, want, out)
			}
		}
		// The API server's data is on the claim the chart made, bound.
		s.apiClaimBound(t)
		v := oneCluster(t, s.api, 2*time.Minute, names)
		s.clusterID = v.ClusterID
		t.Logf("cluster %s, leader %s", v.ClusterID, v.LeaderID)

		createGraph(t, s.api, s.ns)
		text := "Kubernetes ran these pods; the chunks come back in order."
		id, err := uploadOnce(s.api, s.ns, text)
		if err != nil {
			t.Fatal(err)
		}
		s.acked = append(s.acked, uploaded{id, text})
		if got := strings.Join(chunksOf(t, s.api, s.ns, id), ""); got != text {
			t.Fatalf("chunks reassemble to %q", got)
		}
		t.Logf("timing: scenario 1: %s", time.Since(start).Round(time.Second))
	})
	if !ok {
		return
	}

	if !t.Run("kubectl delete pod of the leader: it comes back with a new IP under the same name and rejoins, no write lost", func(t *testing.T) {
		start := time.Now()
		v := oneCluster(t, s.api, time.Minute, names)
		victim := v.LeaderID
		old, err := r.pod(t, victim)
		if err != nil {
			t.Fatal(err)
		}
		before := contentIDs(t, s.api, s.ns)

		// A bounded writer: at most 600 uploads, one every 100ms, until told
		// to stop.
		w := startWriter(s.api, s.ns, len(s.acked), 600, 100*time.Millisecond)
		defer w.stop()
		harness.Eventually(t, 30*time.Second, "the writer's first acknowledged upload", func() error {
			if w.acked() == 0 {
				return fmt.Errorf("none yet; failures %v", w.failures())
			}
			return nil
		})

		mustKubectl(t, "-n", r.ns, "delete", "pod", victim, "--wait=false")
		t.Logf("deleted %s (uid %s, ip %s)", victim, old.UID, old.Status.PodIP)
		harness.Eventually(t, 3*time.Minute, victim+" back and ready", func() error {
			p, err := r.pod(t, victim)
			if err != nil {
				return err
			}
			if p.UID == old.UID {
				return fmt.Errorf("still the old pod (%s)", p.Status.Phase)
			}
			if ok, _ := podReady(p); !ok {
				return fmt.Errorf("new pod %s not ready (%s)", p.UID, p.Status.Phase)
			}
			if p.Status.PodIP == "" || p.Status.PodIP == old.Status.PodIP {
				t.Fatalf("new pod %s has ip %q, the old one had %s", p.UID, p.Status.PodIP, old.Status.PodIP)
			}
			t.Logf("%s back as uid %s with ip %s after %s", victim, p.UID, p.Status.PodIP, time.Since(start).Round(time.Second))
			return nil
		})
		after := oneCluster(t, s.api, 2*time.Minute, names)
		if after.ClusterID != s.clusterID {
			t.Fatalf("cluster id %s, was %s", after.ClusterID, s.clusterID)
		}
		// Writes resume: more acknowledged uploads after the rejoin.
		resumed(t, w, 5, time.Minute)
		acks, failed := w.stop()
		s.acked = append(s.acked, acks...)
		s.keptAll(t, before, acks)
		t.Logf("%d uploads acknowledged, all kept; %d refused during the change of leader: %v", len(acks), len(failed), failed)
		// What was uploaded before is still extracted on the new pods.
		last := acks[len(acks)-1]
		if got := strings.Join(chunksOf(t, s.api, s.ns, last.id), ""); got != last.text {
			t.Fatalf("last upload's chunks: %q, want %q", got, last.text)
		}
		s.bytesKept(t)
		t.Logf("timing: scenario 2: %s", time.Since(start).Round(time.Second))
	}) {
		return
	}
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"securityContext enforced: non-root, no capabilities, read-only root filesystem, and the containers work", s.securityEnforced},
		{"kubectl drain of the only node: one eviction allowed, the next refused by the PDB, the quorum serves", s.drainRefused},
		{"helm upgrade to a new image tag under an upload load: no acknowledged upload or byte lost, the PDB holds, uploads refused only while no API pod was ready", s.imageUpgrade},
		{"helm upgrade coordinator.replicas 3 to 5 and back: members follow, data kept, pods not rolled", s.scale},
		{"kubectl delete pod of every coordinator at once: same cluster id, data kept, new pod IPs, writes resume", s.everyPodDeleted},
	} {
		if !t.Run(sc.name, sc.run) {
			return
		}
	}
	t.Logf("timing: TestChart scenarios: %s", time.Since(suiteStart).Round(time.Second))
}

func uploadText(i int) string { return fmt.Sprintf("upload number %04d survives", i) }

// uploaded is one acknowledged upload: its content id and its bytes.
type uploaded struct{ id, text string }

// refusal is one upload that failed: when it was sent, when it failed, why.
type refusal struct {
	sent, failed time.Time
	err          string
}

func (f refusal) String() string {
	return fmt.Sprintf("%s-%s %s", f.sent.Format("15:04:05.000"), f.failed.Format("15:04:05.000"), f.err)
}

// writer uploads one file per period until stopped or max uploads; its
// n-th acknowledged upload has the text uploadText(from+n), so the texts of
// the writers of one run never repeat.
type writer struct {
	mu     sync.Mutex
	from   int
	acks   []uploaded
	errs   []refusal
	quit   chan struct{}
	done   chan struct{}
	closed sync.Once
}

func startWriter(api *harness.HTTP, ns string, from, max int, period time.Duration) *writer {
	w := &writer{from: from, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := 0; i < max; i++ {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			text := uploadText(w.from + w.acked())
			sent := time.Now()
			id, err := uploadOnce(api, ns, text)
			w.mu.Lock()
			if err != nil {
				w.errs = append(w.errs, refusal{sent, time.Now(), err.Error()})
			} else {
				w.acks = append(w.acks, uploaded{id, text})
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

func (w *writer) failures() []refusal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]refusal(nil), w.errs...)
}

// stop ends the writer and returns the acknowledged uploads and the
// failures.
func (w *writer) stop() ([]uploaded, []refusal) {
	w.closed.Do(func() { close(w.quit) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uploaded(nil), w.acks...), append([]refusal(nil), w.errs...)
}
