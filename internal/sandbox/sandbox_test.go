package sandbox

import "testing"

func TestKillReasonString(t *testing.T) {
	t.Parallel()
	if got := KillReason("").String(); got != "unknown" {
		t.Fatalf("empty reason = %q, want unknown", got)
	}
	if got := KillTTLBackstop.String(); got != "ttl_backstop" {
		t.Fatalf("KillTTLBackstop = %q", got)
	}
}

func TestNewIDValid(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if len(id) != 20 || !ValidID(id) {
			t.Fatalf("NewID() = %q: not a valid 20-char ID", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id   string
		want bool
	}{
		{"abc123", true}, {"a-b", true}, {"", false}, {"ABC", false},
		{"../etc", false}, {"a b", false}, {string(make([]byte, 65)), false},
	} {
		if got := ValidID(c.id); got != c.want {
			t.Errorf("ValidID(%q) = %v, want %v", c.id, got, c.want)
		}
	}
}

func TestStateValid(t *testing.T) {
	t.Parallel()
	if !StateRunning.Valid() || State("zombie").Valid() {
		t.Fatal("State.Valid disagrees")
	}
}

func TestTasksPerUser(t *testing.T) {
	for _, tt := range []struct {
		r    Resources
		want int64
	}{
		{Resources{Pids: 1024, MemoryMB: 512}, 512},
		{Resources{Pids: 100, MemoryMB: 512}, 100},
		{Resources{MemoryMB: 256}, 256},
		{Resources{Pids: 64}, 64},
		{Resources{}, 0},
	} {
		if got := tt.r.TasksPerUser(); got != tt.want {
			t.Errorf("%+v.TasksPerUser() = %d, want %d", tt.r, got, tt.want)
		}
	}
}
