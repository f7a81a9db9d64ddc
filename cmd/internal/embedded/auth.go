package embedded

// Who may use the embedded server.
//
// The public frontend (the configured port) admits only callers that
// present a key of this start in gRPC metadata as `authorization: Bearer
// <key>`: the API key (admin: factoryd's own SDK client, and processes given
// the key file) and the Web UI's key (reader: the UI can list and show, not
// change). Anyone else gets PermissionDenied from every API but the health
// check and GetSystemInfo.
//
// The server's own callers (the worker service running schedules, the
// batcher and the system workflows; history and matching calling each other)
// never present a key: they reach an internal frontend and each other over
// mutual TLS with a certificate authority made at start and kept in memory
// only. Without that certificate nothing can speak gRPC to the internal
// frontend, history, matching or worker ports.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/rpc/encryption"
)

// APIKeyFile is the file, in the server's data directory, holding the
// current start's API key (mode 0600, replaced at every start).
const APIKeyFile = "api.key"

// newKey returns a random key: 32 bytes, hex.
func newKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// writeKeyFile replaces the API key file: written aside with mode 0600,
// then renamed, so a reader never sees half a key.
func writeKeyFile(dir, key string) error {
	path := filepath.Join(dir, APIKeyFile)
	tmp, err := os.CreateTemp(dir, APIKeyFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(key + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// keyClaims maps the bearer key a caller presents to its role: the API key
// to admin, the UI's key to reader, anything else (or nothing) to no role.
type keyClaims struct {
	admin, reader []byte // "Bearer <key>"
}

func newKeyClaims(apiKey, uiKey string) *keyClaims {
	return &keyClaims{admin: []byte("Bearer " + apiKey), reader: []byte("Bearer " + uiKey)}
}

func (k *keyClaims) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	token := []byte(info.AuthToken)
	switch {
	case subtle.ConstantTimeCompare(token, k.admin) == 1:
		return &authorization.Claims{Subject: "linefactory", System: authorization.RoleAdmin}, nil
	case subtle.ConstantTimeCompare(token, k.reader) == 1:
		return &authorization.Claims{Subject: "linefactory-ui", System: authorization.RoleReader}, nil
	}
	// No role: the authorizer denies (an error would be logged per call).
	return &authorization.Claims{}, nil
}

// internodeTLS is the server's TLS: mutual TLS between its own services
// and to the internal frontend, none on the public frontend (its callers
// authenticate with a key).
type internodeTLS struct {
	server, client *tls.Config
}

var _ encryption.TLSConfigProvider = (*internodeTLS)(nil)

// internodeName is the name the internode certificate is for.
const internodeName = "temporal-internode.linefactory.invalid"

// newInternodeTLS makes a certificate authority and one certificate it
// signs (for serving and for calling), both in memory only.
func newInternodeTLS() (*internodeTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "linefactory embedded temporal CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(20, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: internodeName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(20, 0, 0),
		DNSNames: []string{internodeName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("internode certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &internodeTLS{
		server: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
			MinVersion: tls.VersionTLS13},
		client: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: internodeName,
			MinVersion: tls.VersionTLS13},
	}, nil
}

func (p *internodeTLS) GetInternodeServerConfig() (*tls.Config, error) { return p.server.Clone(), nil }
func (p *internodeTLS) GetInternodeClientConfig() (*tls.Config, error) { return p.client.Clone(), nil }
func (p *internodeTLS) GetFrontendServerConfig() (*tls.Config, error)  { return nil, nil }
func (p *internodeTLS) GetFrontendClientConfig() (*tls.Config, error)  { return nil, nil }
func (p *internodeTLS) GetRemoteClusterClientConfig(string) (*tls.Config, error) {
	return nil, nil
}
func (p *internodeTLS) GetExpiringCerts(time.Duration) (encryption.CertExpirationMap, encryption.CertExpirationMap, error) {
	return nil, nil, nil
}
