package toolgate_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

const crashEnv = "TOOLGATE_CRASH_CHILD_DB"

// TestMain runs the crash child when $TOOLGATE_CRASH_CHILD_DB is set (see
// TestKill9LosesNoAcknowledgedCall) and the tests otherwise.
func TestMain(m *testing.M) {
	if args := os.Getenv(serveChildEnv); args != "" {
		os.Exit(cli.Main(context.Background(), strings.Split(args, "\x1f"), strings.NewReader(""), os.Stdout, os.Stderr))
	}
	if path := os.Getenv(crashEnv); path != "" {
		if err := runCrashChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		return
	}
	os.Exit(m.Run())
}

// runCrashChild serves calls under concurrent load on the database at path
// until it is killed. The tool appends "ran <id>" to ran.log before
// returning; "ack <id>" is printed once a call's result came back.
func runCrashChild(path string) error {
	key, _, err := receipt.LoadOrCreateKey(filepath.Join(filepath.Dir(path), "toolgate.key"))
	if err != nil {
		return err
	}
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		return err
	}
	prog, err := policy.Load("crash.yaml", []byte(allowAllPolicy), policy.Options{})
	if err != nil {
		return err
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog, SigningKey: key, Events: store.EventLog(st), Receipts: store.ReceiptLog(st)})
	if err != nil {
		return err
	}
	ranLog, err := os.OpenFile(filepath.Join(filepath.Dir(path), "ran.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:crash.work", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
		func(_ context.Context, args json.RawMessage) (any, error) {
			var in struct{ ID string }
			json.Unmarshal(args, &in)
			fmt.Fprintf(ranLog, "ran %s\n", in.ID) // one write(2): survives SIGKILL
			return map[string]string{"done": in.ID}, nil
		}); err != nil {
		return err
	}
	var mu sync.Mutex
	prefix := fmt.Sprintf("p%d-", os.Getpid())
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("%sw%d-%d", prefix, w, i)
				res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:crash.work", CallID: id, RunID: "crash",
					Principal: alice, Args: json.RawMessage(`{"ID":"` + id + `"}`)})
				if err != nil || res.Status != audit.StatusOK {
					fmt.Fprintf(os.Stderr, "call %s: %v %+v\n", id, err, res)
					continue
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "ack %s\n", id)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return nil
}

// TestKill9LosesNoAcknowledgedCall (issue 3, acceptance 2): a child serves
// calls under load and is killed with SIGKILL at a random moment, 20 times,
// on the same database. After every kill the database opens without repair;
// every acknowledged call has agent.toolCalled, agent.toolReturned and a
// receipt; no call ran without its agent.toolCalled; the chain verifies.
func TestKill9LosesNoAcknowledgedCall(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "toolgate.db")
	rng := rand.New(rand.NewPCG(9, 9))
	acked := map[string]bool{}
	replays := 0 // kills that left acknowledged records in the journal only
	for kill := 0; kill < 20; kill++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		target := 1 + rng.IntN(300)
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "ack "); ok {
				acked[id] = true
				if n++; n == target {
					cmd.Process.Signal(syscall.SIGKILL)
				}
			}
		}
		cmd.Wait()
		if n < target {
			t.Fatalf("kill %d: child exited after %d acks (wanted %d): %s", kill, n, target, stderr.String())
		}
		if fi, err := os.Stat(path + sqlite.JournalSuffix); err == nil && fi.Size() > 0 {
			replays++
		}
		checkAfterCrash(t, kill, path, acked)
	}
	if replays == 0 {
		t.Fatal("no kill left records in the journal: the replay at Open was never exercised")
	}
	t.Logf("20 kills (%d with a journal to replay), %d acknowledged calls, all recorded", replays, len(acked))
}

func checkAfterCrash(t *testing.T, kill int, path string, acked map[string]bool) {
	t.Helper()
	key, _, err := receipt.LoadOrCreateKey(filepath.Join(filepath.Dir(path), "toolgate.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		t.Fatalf("kill %d: the database does not open: %v", kill, err)
	}
	defer st.Close()
	called, returned := map[string]bool{}, map[string]bool{}
	for after := int64(-1); ; {
		evs, err := st.EventsByRun(context.Background(), "acme", "crash", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Sequence != after+1 {
				t.Fatalf("kill %d: sequence gap: %d after %d", kill, e.Sequence, after)
			}
			after = e.Sequence
			var p struct{ CallID string }
			json.Unmarshal(e.Payload, &p)
			switch e.Type {
			case audit.TypeToolCalled:
				called[p.CallID] = true
			case audit.TypeToolReturned:
				returned[p.CallID] = true
			}
		}
	}
	var buf bytes.Buffer
	if err := st.ExportReceipts(context.Background(), &buf, st.ChainID(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(bytes.NewReader(buf.Bytes()), key.Public().(ed25519.PublicKey), receipt.VerifyOptions{}); err != nil {
		t.Fatalf("kill %d: receipts do not verify: %v", kill, err)
	}
	receipted := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r struct{ CallID string }
		json.Unmarshal([]byte(line), &r)
		receipted[r.CallID] = true
	}
	for id := range acked {
		if !called[id] || !returned[id] || !receipted[id] {
			t.Fatalf("kill %d: acknowledged call %s: toolCalled %v, toolReturned %v, receipt %v", kill, id, called[id], returned[id], receipted[id])
		}
	}
	ran, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "ran.log"))
	for _, line := range strings.Split(strings.TrimSpace(string(ran)), "\n") {
		if id, ok := strings.CutPrefix(line, "ran "); ok && !called[id] {
			t.Fatalf("kill %d: call %s ran without a durable agent.toolCalled", kill, id)
		}
	}
}
