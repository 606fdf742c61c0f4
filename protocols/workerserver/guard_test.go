package workerserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The user API takes the token and nothing a web page could make a
// browser send: no cross-origin request, no form post, no Host name of
// another site (DNS rebinding). The worker routes keep the servers'
// passwords.
func TestAPIGuard(t *testing.T) {
	f := openFixture(t, t.TempDir()+"/master.db", func(m *Master) {
		m.APIToken = "tok3n"
		m.Hosts = []string{"master.example"}
	})
	f.online("s1")
	do := func(method, path, contentType, body string, header ...string) int {
		req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
				continue
			}
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		code, _ := readAnswer(t, resp)
		return code
	}
	auth := []string{"Authorization", "Bearer tok3n"}
	assert.Equal(t, http.StatusOK, do("GET", "/api/jobs", "", "", auth...))
	assert.Equal(t, http.StatusOK, do("GET", "/api/servers/s1", "", "", append(auth, "Host", "master.example:8080")...))
	assert.Equal(t, http.StatusOK, do("GET", "/api/jobs", "", "", append(auth, "Host", "localhost:8080")...))

	assert.Equal(t, http.StatusUnauthorized, do("GET", "/api/jobs", "", ""))
	assert.Equal(t, http.StatusUnauthorized, do("GET", "/api/jobs", "", "", "Authorization", "Bearer tok3"))
	assert.Equal(t, http.StatusUnauthorized, do("GET", "/api/jobs", "", "", "Authorization", "Bearer tok3n0"))
	assert.Equal(t, http.StatusForbidden, do("GET", "/api/jobs", "", "", append(auth, "Origin", "https://evil.example")...))
	assert.Equal(t, http.StatusForbidden, do("GET", "/api/jobs", "", "", append(auth, "Sec-Fetch-Site", "cross-site")...))
	assert.Equal(t, http.StatusMisdirectedRequest, do("GET", "/api/jobs", "", "", append(auth, "Host", "evil.example")...))
	// A form post, as any web page can send with no preflight, cancels
	// nothing, even with the token.
	assert.Equal(t, http.StatusUnsupportedMediaType, do("POST", "/api/jobs/1/cancel", "text/plain", "{}", auth...))
	assert.Equal(t, http.StatusNotFound, do("POST", "/api/jobs/1/cancel", "application/json", "{}", auth...))

	// The worker routes answer to the server's password, not the token.
	code, _ := f.post("/api/servers/ping/s1", form("s1", "", nil))
	assert.Equal(t, http.StatusOK, code)
}
