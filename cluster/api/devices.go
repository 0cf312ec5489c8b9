package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// SetDeviceLabelsRequest is the body of PUT /v1/devices/{id}/labels. The
// device's new control-plane labels are its current ones (none if the
// control plane never labelled it: reported labels are not carried over),
// or none with Replace, with Labels set and the keys in Remove deleted.
type SetDeviceLabelsRequest struct {
	Labels  map[string]string `json:"labels,omitempty"`
	Remove  []string          `json:"remove,omitempty"`
	Replace bool              `json:"replace,omitempty"`
}

// DeviceLabels answers GET and PUT /v1/devices/{id}/labels: where a
// device's labels come from.
type DeviceLabels struct {
	ID string `json:"id"`
	// Labels are the control-plane labels (enrollment, meteor device
	// label); Controlled says the control plane has set them, even to none.
	Labels     map[string]string `json:"labels,omitempty"`
	Controlled bool              `json:"controlled"`
	// Reported are the labels the device's agent reports: facts it states
	// about itself, which select nothing unless the cluster trusts them.
	Reported map[string]string `json:"reported,omitempty"`
	// Selection are the labels intents are selected by: Labels once
	// Controlled; otherwise Reported if TrustReported (a development
	// cluster), else none.
	Selection     map[string]string `json:"selection,omitempty"`
	TrustReported bool              `json:"trust_reported"`
}

// RevokeDeviceRequest is the (optional) body of POST
// /v1/devices/{id}/revoke.
type RevokeDeviceRequest struct {
	Reason string `json:"reason,omitempty"`
}

// RevokedDevice is one revocation.
type RevokedDevice struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor"`
	Time   time.Time `json:"time"`
	// Index is the Raft index of the revocation.
	Index uint64 `json:"index"`
}

// RevokedDeviceList answers GET /v1/revocations.
type RevokedDeviceList struct {
	Devices []RevokedDevice `json:"devices"`
}

// DeviceLabels reads where a device's labels come from.
func (c *Client) DeviceLabels(ctx context.Context, id string, o ReadOptions) (*DeviceLabels, error) {
	var out DeviceLabels
	err := c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id)+"/labels", o.query(), nil, nil, &out)
	return &out, err
}

// SetDeviceLabels changes a device's control-plane labels and returns
// them as the change left them.
func (c *Client) SetDeviceLabels(ctx context.Context, id string, req SetDeviceLabelsRequest) (*DeviceLabels, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out DeviceLabels
	err = c.do(ctx, http.MethodPut, "/v1/devices/"+url.PathEscape(id)+"/labels", nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// RevokeDevice revokes a device: every server refuses it and closes its
// sessions.
func (c *Client) RevokeDevice(ctx context.Context, id, reason string) (*RevokedDevice, error) {
	body, err := jsonBody(RevokeDeviceRequest{Reason: reason})
	if err != nil {
		return nil, err
	}
	var out RevokedDevice
	err = c.do(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(id)+"/revoke", nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// UnrevokeDevice undoes a device's revocation.
func (c *Client) UnrevokeDevice(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/devices/"+url.PathEscape(id)+"/revoke", nil, nil, nil, nil)
}

// RevokedDevices lists the revocations.
func (c *Client) RevokedDevices(ctx context.Context, o ReadOptions) (*RevokedDeviceList, error) {
	var out RevokedDeviceList
	err := c.do(ctx, http.MethodGet, "/v1/revocations", o.query(), nil, nil, &out)
	return &out, err
}

// UnlockDevice orders a workload lock on a device broken: the lock of that
// name the device last reported, and no later acquisition of it. The
// device's agent breaks it when it gets the order and reports the outcome.
func (c *Client) UnlockDevice(ctx context.Context, id, lock, reason string) (*UnlockOrder, error) {
	body, err := jsonBody(UnlockDeviceRequest{Lock: lock, Reason: reason})
	if err != nil {
		return nil, err
	}
	var out UnlockOrder
	err = c.do(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(id)+"/unlock", nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}
