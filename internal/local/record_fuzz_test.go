package local

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRecordRoundTrip: what a local sandbox keeps on disk and reads back:
// its record (state.json, through records.Read: at most 1 MiB) and a
// snapshot's snapshot.json (read by fork and List). Properties: any bytes
// are a record or an error that says the record is corrupt, never a panic;
// and a record read back, written again as the supervisor writes it, reads
// back the same (nothing a reader accepts is lost or changed on rewrite).
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add([]byte(`{"id":"l123","name":"n","tags":{"a":"b"},"created_at":"2026-01-01T00:00:00Z","shim_pid":12,"shim_start":99,"token":"t","network":"allowlist","allowed_hosts":["example.com"],"memory_bytes":1073741824,"cpus":1.5,"paused":true}`), false)
	f.Add([]byte(`{"name":"s1","created_at":"2026-01-01T00:00:00+01:00","from":"l123","spec":{}}`), true)
	f.Add([]byte(`{"id":"x","created_at":"not a time"}`), false)
	f.Add([]byte(`{"id":1}`), false)
	f.Add([]byte(`{} trailing`), false)
	f.Add([]byte(`null`), true)
	f.Fuzz(func(t *testing.T, raw []byte, snapshot bool) {
		dir := t.TempDir()
		if snapshot {
			var m snapshotMeta
			if json.Unmarshal(raw, &m) != nil {
				return
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatalf("a snapshot.json read back does not encode: %v", err)
			}
			var again snapshotMeta
			if err := json.Unmarshal(b, &again); err != nil {
				t.Fatalf("snapshot.json written is refused: %v", err)
			}
			if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
				t.Fatalf("snapshot.json round trip changed it:\n%s\n%s", b, b2)
			}
			return
		}
		if err := os.WriteFile(filepath.Join(dir, stateFile), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := readRecord(dir)
		if err != nil {
			if !strings.Contains(err.Error(), "corrupt record") {
				t.Fatalf("refusal does not say the record is corrupt: %v", err)
			}
			return
		}
		first, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a record read back does not encode: %v", err)
		}
		if err := writeRecord(dir, r); err != nil {
			t.Fatal(err)
		}
		again, err := readRecord(dir)
		if err != nil {
			t.Fatalf("the record written is refused: %v", err)
		}
		if second, _ := json.Marshal(again); !bytes.Equal(first, second) {
			t.Fatalf("record round trip changed it:\n%s\n%s", first, second)
		}
	})
}
