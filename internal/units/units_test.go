package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:                "0 KiB",
		1023:             "0 KiB",
		512 << 10:        "512 KiB",
		1 << 20:          "1 MiB",
		12<<20 + 400<<10: "12 MiB",
		1<<30 - 1:        "1024 MiB",
		1 << 30:          "1.0 GiB",
		1288490188:       "1.2 GiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
