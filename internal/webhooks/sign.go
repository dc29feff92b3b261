package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Sign is the webhook-signature header of a message (id, its
// webhook-timestamp in Unix seconds, body) under secrets: "v1,<base64
// HMAC-SHA256 of id.timestamp.body>" for each, space-separated, as
// Standard Webhooks writes it.
func Sign(id string, timestamp int64, body []byte, secrets ...string) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
		if err != nil || len(key) == 0 {
			return "", fmt.Errorf("webhooks: a secret is not whsec_ and base64")
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}
