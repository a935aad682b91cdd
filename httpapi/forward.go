package httpapi

import (
	"fmt"
	"io"
	"net/http"

	"github.com/oxbow-dev/oxbow/engine"
)

// ForwardedHeader marks a request forwarded by an instance to the owner of
// its key, with the forwarder's id: an owner that does not hold the key
// either answers 421 instead of forwarding again. With an Authenticator
// and a PeerSecret, it is taken only under the forwarder's signature.
const ForwardedHeader = "Oxbow-Forwarded-By"

// forward sends the request to the key's owner and copies its answer.
func (a *api) forward(w http.ResponseWriter, r *http.Request, nl *engine.NotLocalError) {
	if from := r.Header.Get(ForwardedHeader); from != "" {
		// The forwarder thought this instance owns the key; it does not
		// (the group rebalanced meanwhile): let the client ask again
		// rather than pass the request around.
		a.problem(w, r, http.StatusMisdirectedRequest, "not the owner", fmt.Sprintf("instance %s forwarded the request here, but %v; retry", from, nl))
		return
	}
	if nl.Owner.Addr == "" {
		w.Header().Set("Retry-After", "1")
		detail := nl.Error()
		if nl.Owner.ID != "" {
			detail += "; that instance advertises no HTTP address (engine.Config.AdvertisedAddr)"
		}
		a.problem(w, r, http.StatusServiceUnavailable, "owner unavailable", detail)
		return
	}
	req, err := a.peerRequest(r, nl.Owner.Addr, ForwardedHeader)
	if err != nil {
		a.problem(w, r, http.StatusBadGateway, "forward failed", err.Error())
		return
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		a.problem(w, r, http.StatusBadGateway, "forward failed", fmt.Sprintf("the owner %s (%s): %v", nl.Owner.ID, nl.Owner.Addr, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Oxbow-Served-By", nl.Owner.ID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
