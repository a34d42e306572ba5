package subscriptions

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrSecretKey marks a subscription whose stored secret cannot be read:
// it is encrypted and no key is set, or none of the keys decrypts it.
var ErrSecretKey = errors.New("subscription secret cannot be decrypted")

// sealedPrefix starts a secret encrypted at rest: enc:v1:<base64 of the
// 12-byte nonce and the AES-256-GCM ciphertext with its tag>.
const sealedPrefix = "enc:v1:"

// SecretKeys encrypt subscriber secrets and header values at rest in the
// subscriptions topic (AES-256-GCM, a random nonce per secret, the
// subscription id and field as additional data, so a sealed secret cannot
// be moved to another subscription, field or header). Secrets are sealed with the current key and
// opened with the current or the previous one, so a key can be rotated
// (see Registry.Reseal).
type SecretKeys struct {
	current, previous cipher.AEAD // previous may be nil
}

// NewSecretKeys takes the current key (HOOKSTREAM_SECRET_KEY) and the
// previous one (HOOKSTREAM_SECRET_KEY_PREVIOUS, may be nil), 32 bytes
// each.
func NewSecretKeys(current, previous []byte) (*SecretKeys, error) {
	k := &SecretKeys{}
	var err error
	if k.current, err = newAEAD(current); err != nil {
		return nil, fmt.Errorf("HOOKSTREAM_SECRET_KEY: %w", err)
	}
	if previous != nil {
		if k.previous, err = newAEAD(previous); err != nil {
			return nil, fmt.Errorf("HOOKSTREAM_SECRET_KEY_PREVIOUS: %w", err)
		}
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("key of %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts the secret of field of subscription id; nil keys and empty
// secrets leave it as it is.
func (k *SecretKeys) seal(id, field, secret string) string {
	if k == nil || secret == "" {
		return secret
	}
	nonce := make([]byte, k.current.NonceSize(), k.current.NonceSize()+len(secret)+k.current.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand never fails on Linux
	sealed := k.current.Seal(nonce, nonce, []byte(secret), additionalData(id, field))
	return sealedPrefix + base64.StdEncoding.EncodeToString(sealed)
}

// open returns the secret stored for field of subscription id, and
// whether it is sealed with the current key (false for a plaintext secret
// while keys are set, or one sealed with the previous key: Reseal rewrites
// those). A plaintext secret is returned as it is.
func (k *SecretKeys) open(id, field, stored string) (secret string, current bool, err error) {
	b64, sealed := strings.CutPrefix(stored, sealedPrefix)
	switch {
	case !sealed:
		return stored, k == nil || stored == "", nil
	case k == nil:
		return "", false, fmt.Errorf("%w: subscription %s: its %s is encrypted and HOOKSTREAM_SECRET_KEY is not set", ErrSecretKey, id, field)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) < k.current.NonceSize() {
		return "", false, fmt.Errorf("%w: subscription %s: its %s is not a valid enc:v1 value", ErrSecretKey, id, field)
	}
	nonce, ciphertext := raw[:k.current.NonceSize()], raw[k.current.NonceSize():]
	ad := additionalData(id, field)
	if plain, err := k.current.Open(nil, nonce, ciphertext, ad); err == nil {
		return string(plain), true, nil
	}
	if k.previous != nil {
		if plain, err := k.previous.Open(nil, nonce, ciphertext, ad); err == nil {
			return string(plain), false, nil
		}
		return "", false, fmt.Errorf("%w: subscription %s: its %s was encrypted with neither HOOKSTREAM_SECRET_KEY nor HOOKSTREAM_SECRET_KEY_PREVIOUS", ErrSecretKey, id, field)
	}
	return "", false, fmt.Errorf("%w: subscription %s: its %s was encrypted with another key than HOOKSTREAM_SECRET_KEY (during a rotation, set the old one as HOOKSTREAM_SECRET_KEY_PREVIOUS)", ErrSecretKey, id, field)
}

func additionalData(id, field string) []byte {
	return []byte("hookstream subscription " + id + " " + field)
}

// headerField is the field of header name's value in the additional
// data: each value is bound to its subscription and header.
func headerField(name string) string { return "header " + name }

// sealSecrets returns s with its secrets and header values sealed.
func (k *SecretKeys) sealSecrets(s Subscription) Subscription {
	s.Secret = k.seal(s.ID, "secret", s.Secret)
	s.PreviousSecret = k.seal(s.ID, "previous_secret", s.PreviousSecret)
	if s.Headers != nil {
		sealed := make(map[string]string, len(s.Headers))
		for name, value := range s.Headers {
			sealed[name] = k.seal(s.ID, headerField(name), value)
		}
		s.Headers = sealed
	}
	return s
}

// openSecrets opens the secrets and header values of a stored
// subscription; current reports whether all are sealed with the current
// key (or plaintext without keys).
func (k *SecretKeys) openSecrets(s Subscription) (out Subscription, current bool, err error) {
	var cur, prevCur bool
	if s.Secret, cur, err = k.open(s.ID, "secret", s.Secret); err != nil {
		return Subscription{}, false, err
	}
	if s.PreviousSecret, prevCur, err = k.open(s.ID, "previous_secret", s.PreviousSecret); err != nil {
		return Subscription{}, false, err
	}
	current = cur && prevCur
	if s.Headers != nil {
		opened := make(map[string]string, len(s.Headers))
		for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
			value, cur, err := k.open(s.ID, headerField(name), s.Headers[name])
			if err != nil {
				return Subscription{}, false, err
			}
			opened[name], current = value, current && cur
		}
		s.Headers = opened
	}
	return s, current, nil
}
