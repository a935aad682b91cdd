package httpapi

import (
	"context"
	"net/http"
	"time"
)

// SignPeer marks req as sent by the instance forwardedBy for caller,
// signed with secret at the time at, as an instance signs what it
// forwards.
func SignPeer(req *http.Request, secret []byte, caller Identity, forwardedBy string, at time.Time) {
	req.Header.Set(ForwardedHeader, forwardedBy)
	r := req.WithContext(context.WithValue(req.Context(), identityKey{}, caller))
	_ = peering{secret: secret, now: func() time.Time { return at }}.sign(req, r)
}
