package subscriptions_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

func secureRegistry(t *testing.T, env *kafkatest.Env, sec subscriptions.Security) *subscriptions.Registry {
	t.Helper()
	return subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t)).Secure(sec)
}

// refusedWithoutTheKey checks that without a key, or with another, a
// starting process refuses naming HOOKSTREAM_SECRET_KEY and subscription
// id (Reseal, before its dispatcher starts), and a reader skips id.
func refusedWithoutTheKey(t *testing.T, env *kafkatest.Env, id string) {
	t.Helper()
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		sec  subscriptions.Security
		want string
	}{
		{"no key", subscriptions.Security{}, "HOOKSTREAM_SECRET_KEY is not set"},
		{"wrong key", subscriptions.Security{Keys: mustKeys(t, newKey(t), nil)}, "HOOKSTREAM_SECRET_KEY"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := secureRegistry(t, env, tt.sec)
			_, err := r.Reseal(ctx)
			if !errors.Is(err, subscriptions.ErrSecretKey) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), id) {
				t.Errorf("Reseal: got %v, want ErrSecretKey naming %s and %q", err, id, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("Reseal: error %q is more than one line", err)
			}
			if subs, err := r.List(ctx); err != nil || len(subs) != 0 {
				t.Errorf("List: got %v, %v, want %s skipped", subs, err, id)
			}
		})
	}
}

func mustKeys(t *testing.T, current, previous []byte) *subscriptions.SecretKeys {
	t.Helper()
	k, err := subscriptions.NewSecretKeys(current, previous)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSecretsEncryptedAtRest: with a key, the compacted topic holds no
// secret in plaintext, readers with the key see it as it was set, and
// without it or with another key a starting process refuses naming
// HOOKSTREAM_SECRET_KEY (a reader skips the subscription).
func TestSecretsEncryptedAtRest(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	key := newKey(t)
	r := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, key, nil)})
	s := &subscriptions.Subscription{URL: "https://example.com/hook"}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	rotated, err := r.Update(ctx, s.ID, func(s *subscriptions.Subscription) error { s.Rotate("", time.Now()); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if rotated.PreviousSecret != s.Secret {
		t.Fatalf("rotation: previous secret %q, want %q", rotated.PreviousSecret, s.Secret)
	}
	for _, rec := range env.Records(t, env.Names.Subscriptions) {
		for _, secret := range []string{s.Secret, rotated.Secret, strings.TrimPrefix(s.Secret, "whsec_"), strings.TrimPrefix(rotated.Secret, "whsec_")} {
			if bytes.Contains(rec.Value, []byte(secret)) {
				t.Errorf("record %d holds a secret in plaintext: %s", rec.Offset, rec.Value)
			}
		}
		var stored subscriptions.Subscription
		if err := json.Unmarshal(rec.Value, &stored); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(stored.Secret, "enc:v1:") {
			t.Errorf("record %d: secret %q, want enc:v1:...", rec.Offset, stored.Secret)
		}
	}
	got, err := r.Get(ctx, s.ID)
	if err != nil || got.Secret != rotated.Secret || got.PreviousSecret != s.Secret {
		t.Errorf("Get with the key: got %+v, %v, want the secrets as set", got, err)
	}

	refusedWithoutTheKey(t, env, s.ID)
}

// TestHeaderValuesEncryptedAtRest: with a key, a subscription's header
// values are sealed like its secret, each bound to its subscription and
// header name: the topic holds none in plaintext, readers with the key
// see them under canonical names, readers without it or with another key
// fail naming HOOKSTREAM_SECRET_KEY, and a sealed value moved to another
// header does not open.
func TestHeaderValuesEncryptedAtRest(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	r := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, newKey(t), nil)})
	const token, apiKey = "Bearer tok-3f9a1c", "key-77b2e0"
	s := &subscriptions.Subscription{URL: "https://example.com/hook", Headers: map[string]string{"authorization": token, "x-api-key": apiKey}}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Authorization": token, "X-Api-Key": apiKey}
	if !reflect.DeepEqual(s.Headers, want) {
		t.Errorf("created headers: got %v, want %v", s.Headers, want)
	}
	if _, err := r.Update(ctx, s.ID, func(s *subscriptions.Subscription) error { s.Description = "again"; return nil }); err != nil {
		t.Fatal(err)
	}
	recs := env.Records(t, env.Names.Subscriptions)
	var last *kgo.Record
	for _, rec := range recs {
		if rec.Attrs.IsControl() {
			continue
		}
		last = rec
		for _, v := range []string{token, "tok-3f9a1c", apiKey} {
			if bytes.Contains(rec.Value, []byte(v)) {
				t.Errorf("record %d holds a header value in plaintext: %s", rec.Offset, rec.Value)
			}
		}
		var stored subscriptions.Subscription
		if err := json.Unmarshal(rec.Value, &stored); err != nil {
			t.Fatal(err)
		}
		for name, v := range stored.Headers {
			if !strings.HasPrefix(v, "enc:v1:") {
				t.Errorf("record %d: header %s stored as %q, want enc:v1:...", rec.Offset, name, v)
			}
		}
	}
	got, err := r.Get(ctx, s.ID)
	if err != nil || !reflect.DeepEqual(got.Headers, want) {
		t.Errorf("Get with the key: got %v, %v, want %v", got.Headers, err, want)
	}

	refusedWithoutTheKey(t, env, s.ID)

	// Whoever can write the topic swaps the two sealed values.
	var stored map[string]any
	if err := json.Unmarshal(last.Value, &stored); err != nil {
		t.Fatal(err)
	}
	h := stored["headers"].(map[string]any)
	h["Authorization"], h["X-Api-Key"] = h["X-Api-Key"], h["Authorization"]
	swapped, _ := json.Marshal(stored)
	if err := env.Client(t).ProduceSync(ctx, &kgo.Record{Topic: string(env.Names.Subscriptions), Key: []byte(s.ID), Value: swapped}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if subs, err := r.List(ctx); err != nil || len(subs) != 0 {
		t.Errorf("List after swapping sealed header values: got %v, %v, want the subscription skipped", subs, err)
	}
	if _, err := r.Reseal(ctx); !errors.Is(err, subscriptions.ErrSecretKey) || !strings.Contains(err.Error(), "header") {
		t.Errorf("Reseal after swapping sealed header values: got %v, want ErrSecretKey naming a header", err)
	}
}

// TestSecretKeyRotation: records written in plaintext (no key yet) or
// with the previous key are read while HOOKSTREAM_SECRET_KEY_PREVIOUS is
// set; Reseal rewrites them with the current key, after which the
// previous key is no longer needed.
func TestSecretKeyRotation(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	oldKey, newKey := newKey(t), newKey(t)
	plain := &subscriptions.Subscription{URL: "https://example.com/plain", Headers: map[string]string{"X-Token": "plain-token"}}
	if err := secureRegistry(t, env, subscriptions.Security{}).Create(ctx, plain, ""); err != nil {
		t.Fatal(err)
	}
	sealed := &subscriptions.Subscription{URL: "https://example.com/sealed", Headers: map[string]string{"X-Token": "sealed-token"}}
	if err := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, oldKey, nil)}).Create(ctx, sealed, ""); err != nil {
		t.Fatal(err)
	}

	rotating := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, newKey, oldKey)})
	n, err := rotating.Reseal(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Reseal: got %d, %v, want 2 rewritten", n, err)
	}
	if n, err := rotating.Reseal(ctx); err != nil || n != 0 {
		t.Errorf("second Reseal: got %d, %v, want nothing left to rewrite", n, err)
	}
	subs, err := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, newKey, nil)}).List(ctx)
	if err != nil {
		t.Fatalf("List with the new key alone: %v", err)
	}
	if subs[plain.ID].Secret != plain.Secret || subs[sealed.ID].Secret != sealed.Secret {
		t.Errorf("secrets after rotation: got %q and %q, want %q and %q", subs[plain.ID].Secret, subs[sealed.ID].Secret, plain.Secret, sealed.Secret)
	}
	if subs[plain.ID].Headers["X-Token"] != "plain-token" || subs[sealed.ID].Headers["X-Token"] != "sealed-token" {
		t.Errorf("header values after rotation: got %v and %v, want them as set", subs[plain.ID].Headers, subs[sealed.ID].Headers)
	}
}

func TestNewSecretKeysRefusesShortKeys(t *testing.T) {
	if _, err := subscriptions.NewSecretKeys(make([]byte, 16), nil); err == nil {
		t.Error("16-byte key: got no error, want one")
	}
	if _, err := subscriptions.NewSecretKeys(make([]byte, 32), make([]byte, 31)); err == nil {
		t.Error("31-byte previous key: got no error, want one")
	}
}

// TestRequireHTTPS: with RequireHTTPS, a subscription cannot be created
// with, or changed to, an http URL (loopback aside: TLS to this host
// protects nothing); a subscription created before keeps working with
// changes that leave its URL alone.
func TestRequireHTTPS(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	old := &subscriptions.Subscription{URL: "http://hooks.example.com/old"}
	if err := secureRegistry(t, env, subscriptions.Security{}).Create(ctx, old, ""); err != nil {
		t.Fatal(err)
	}
	r := secureRegistry(t, env, subscriptions.Security{RequireHTTPS: true})
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://hooks.example.com/new", false},
		{"HTTP://hooks.example.com/new", false},
		{"https://hooks.example.com/new", true},
		{"http://127.0.0.1:9000/hook", true},
		{"http://localhost:9000/hook", true},
		{"http://[::1]:9000/hook", true},
	} {
		err := r.Create(ctx, &subscriptions.Subscription{URL: tt.url}, "")
		switch {
		case tt.ok && err != nil:
			t.Errorf("Create %s: %v, want it created", tt.url, err)
		case !tt.ok && (!errors.Is(err, subscriptions.ErrInvalid) || !strings.Contains(err.Error(), "url: must be https (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS)")):
			t.Errorf("Create %s: got %v, want ErrInvalid saying https is required", tt.url, err)
		}
	}
	if _, err := r.Update(ctx, old.ID, func(s *subscriptions.Subscription) error { s.Description = "kept"; return nil }); err != nil {
		t.Errorf("Update of another field: %v, want it written", err)
	}
	_, err := r.Update(ctx, old.ID, func(s *subscriptions.Subscription) error { s.URL = "http://hooks.example.com/moved"; return nil })
	if !errors.Is(err, subscriptions.ErrInvalid) {
		t.Errorf("Update to an http URL: got %v, want ErrInvalid", err)
	}
}

// TestForgedSealedSecretSkipped: a record written by another client with
// a sealed secret the keys do not open is skipped and counted once, alone
// or beside a subscription whose own opens, by List and Watch: it stops no
// reader, and subscriptions can still be created. Beside a genuine one,
// a starting process (Reseal) accepts the keys; alone, it refuses them.
func TestForgedSealedSecretSkipped(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	forged := &kgo.Record{Topic: string(env.Names.Subscriptions), Key: []byte("sub_forged"),
		Value: []byte(`{"id":"sub_forged","url":"https://example.com/x","enabled":true,"secret":"enc:v1:` + base64.StdEncoding.EncodeToString(make([]byte, 48)) + `"}`)}
	if err := env.Client(t).ProduceSync(ctx, forged).FirstErr(); err != nil {
		t.Fatal(err)
	}
	keys := subscriptions.Security{Keys: mustKeys(t, newKey(t), nil)}
	reg := prometheus.NewRegistry()
	r := secureRegistry(t, env, keys).Instrument(reg)
	if _, err := r.Reseal(ctx); !errors.Is(err, subscriptions.ErrSecretKey) {
		t.Errorf("Reseal with only the forged record sealed: got %v, want ErrSecretKey", err)
	}
	s := &subscriptions.Subscription{URL: "https://example.com/hook"}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatalf("Create beside the forged record: %v", err)
	}
	subs, err := r.List(ctx)
	if err != nil || len(subs) != 1 || subs[s.ID].Secret != s.Secret {
		t.Errorf("List: got %v, %v, want %s alone, its secret open", subs, err, s.ID)
	}
	if _, err := r.Reseal(ctx); err != nil {
		t.Errorf("Reseal beside a genuine sealed subscription: %v", err)
	}
	if got := skipped(t, reg, env.Names.Subscriptions); got != 1 {
		t.Errorf("hookstream_registry_records_skipped_total: got %v, want 1 (counted once)", got)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan map[string]subscriptions.Subscription, 1)
	go func() {
		_ = r.Watch(wctx, func(m map[string]subscriptions.Subscription) {
			select {
			case seen <- m:
			default:
			}
		})
	}()
	select {
	case m := <-seen:
		if _, ok := m[s.ID]; !ok || len(m) != 1 {
			t.Errorf("Watch: got %v, want %s alone", m, s.ID)
		}
	case <-time.After(30 * time.Second):
		t.Error("Watch delivered nothing in 30 s")
	}
}
