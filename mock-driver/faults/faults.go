// Package faults injects errors and latency into the mock driver's RPCs, set
// by flags and changeable while it runs through a control file in the state
// directory, so end-to-end tests can make a driver slow, flaky or failing
// mid-run.
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fault is what happens to calls of one RPC method.
type Fault struct {
	// Code is the gRPC code to fail with (OK: only the latency applies).
	Code codes.Code `json:"code"`
	// Latency is added before the call is handled.
	Latency time.Duration `json:"latency,omitempty"`
	// Probability of applying the fault to a call, 0 < p <= 1 (0 means 1).
	Probability float64 `json:"probability,omitempty"`
	// Count is how many more calls get the fault; 0 means unlimited.
	Count int `json:"count,omitempty"`
}

// Parse reads "Method:code=Unavailable,latency=2s,prob=0.5,count=3".
func Parse(spec string) (string, Fault, error) {
	method, rest, ok := strings.Cut(spec, ":")
	if !ok || method == "" {
		return "", Fault{}, fmt.Errorf("fault %q: want Method:key=value,...", spec)
	}
	var f Fault
	for _, kv := range strings.Split(rest, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", Fault{}, fmt.Errorf("fault %q: %q is not key=value", spec, kv)
		}
		var err error
		switch k {
		case "code":
			if err = f.Code.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(camelToSnake(v))))); err != nil {
				err = fmt.Errorf("unknown gRPC code %q", v)
			}
		case "latency":
			f.Latency, err = time.ParseDuration(v)
		case "prob", "probability":
			f.Probability, err = strconv.ParseFloat(v, 64)
			if err == nil && (f.Probability < 0 || f.Probability > 1) {
				err = fmt.Errorf("probability %v not in [0,1]", f.Probability)
			}
		case "count":
			f.Count, err = strconv.Atoi(v)
			if err == nil && f.Count < 0 {
				err = fmt.Errorf("count %d < 0", f.Count)
			}
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return "", Fault{}, fmt.Errorf("fault %q: %w", spec, err)
		}
	}
	return method, f, nil
}

func camelToSnake(s string) string {
	if strings.Contains(s, "_") || strings.ToUpper(s) == s {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Store keeps the faults in dir/faults.json, shared by every instance.
type Store struct{ file string }

// NewStore returns the store of state directory dir.
func NewStore(dir string) *Store { return &Store{file: filepath.Join(dir, "faults.json")} }

// Set replaces the fault of method (a zero Fault with Code OK and no latency
// removes it).
func (s *Store) Set(method string, f Fault) error {
	return s.update(func(m map[string]Fault) {
		if f.Code == codes.OK && f.Latency == 0 {
			delete(m, method)
		} else {
			m[method] = f
		}
	})
}

// Clear removes every fault.
func (s *Store) Clear() error {
	return s.update(func(m map[string]Fault) {
		for k := range m {
			delete(m, k)
		}
	})
}

// take returns the fault to apply to one call of method, consuming a count.
func (s *Store) take(method string) (Fault, bool, error) {
	var out Fault
	applied := false
	err := s.update(func(m map[string]Fault) {
		f, ok := m[method]
		if !ok {
			return
		}
		if f.Probability > 0 && f.Probability < 1 && rand.Float64() >= f.Probability {
			return
		}
		out, applied = f, true
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				delete(m, method)
			} else {
				m[method] = f
			}
		}
	})
	return out, applied, err
}

func (s *Store) update(fn func(map[string]Fault)) error {
	lf, err := os.OpenFile(s.file+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	m := map[string]Fault{}
	b, err := os.ReadFile(s.file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("corrupt fault file %s: %w", s.file, err)
		}
	}
	before, _ := json.Marshal(m)
	fn(m)
	after, _ := json.Marshal(m)
	if string(before) == string(after) {
		return nil
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, after, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.file)
}

// Interceptor applies the store's faults to every unary call. Methods are
// named by their short name, e.g. "ControllerUnpublishVolume".
func (s *Store) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
		f, ok, err := s.take(path.Base(info.FullMethod))
		if err != nil {
			return nil, status.Errorf(codes.Internal, "fault injection: %v", err)
		}
		if ok {
			if f.Latency > 0 {
				select {
				case <-time.After(f.Latency):
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
			if f.Code != codes.OK {
				return nil, status.Errorf(f.Code, "injected fault in %s", path.Base(info.FullMethod))
			}
		}
		return handler(ctx, req)
	}
}
