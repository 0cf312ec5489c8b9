package api

import (
	"context"
	"net/http"
	"net/url"
)

// RaftConfiguration answers GET /v1/operator/raft: the servers of the Raft
// configuration as the leader sees them, and what the configuration can
// stand.
type RaftConfiguration struct {
	Leader string `json:"leader"`
	// Peers are the servers of the configuration, by ID.
	Peers []RaftPeer `json:"peers"`
	// Voters counts the voters, AliveVoters those that are alive (alive
	// in gossip and answering); Quorum is how many voters must agree for
	// anything to commit, FailureTolerance how many more voters may fail
	// before the cluster stops taking writes (negative: it has stopped).
	Voters           int `json:"voters"`
	AliveVoters      int `json:"alive_voters"`
	Quorum           int `json:"quorum"`
	FailureTolerance int `json:"failure_tolerance"`
}

// RaftPeer is one server of the Raft configuration.
type RaftPeer struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// GossipState is the server's state in gossip (Member.GossipState);
	// Alive says it is alive there and answered.
	GossipState string `json:"gossip_state"`
	Alive       bool   `json:"alive"`
	// AppliedIndex and LastIndex are its own; TrailsBy is how many
	// entries it has applied fewer than the leader's last index.
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	TrailsBy     uint64 `json:"trails_by"`
	Version      string `json:"version,omitempty"`
	FeatureLevel uint16 `json:"feature_level,omitempty"`
	Error        string `json:"error,omitempty"`
}

// RaftConfiguration reads the Raft configuration from the leader.
func (c *Client) RaftConfiguration(ctx context.Context, o ReadOptions) (*RaftConfiguration, error) {
	var out RaftConfiguration
	err := c.do(ctx, http.MethodGet, "/v1/operator/raft", o.query(), nil, nil, &out)
	return &out, err
}

// TransferLeaderRequest is the body of POST
// /v1/operator/raft/transfer-leader.
type TransferLeaderRequest struct {
	// To is the voter to hand leadership to; "" lets Raft pick the most
	// up-to-date one.
	To string `json:"to,omitempty"`
}

// TransferLeaderResponse answers it.
type TransferLeaderResponse struct {
	Previous string `json:"previous"`
	Leader   string `json:"leader"`
}

// TransferLeader makes the leader hand leadership over and returns the new
// leader.
func (c *Client) TransferLeader(ctx context.Context, to string) (*TransferLeaderResponse, error) {
	body, err := jsonBody(TransferLeaderRequest{To: to})
	if err != nil {
		return nil, err
	}
	var out TransferLeaderResponse
	err = c.do(ctx, http.MethodPost, "/v1/operator/raft/transfer-leader", nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// RemoveMember removes a server from the Raft configuration. The leader
// refuses (409, saying why) to remove a server that is alive, since it
// would add it back (make it leave instead), and one whose removal would
// leave too few alive voters to commit; force removes it anyway.
func (c *Client) RemoveMember(ctx context.Context, id string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return c.do(ctx, http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(id), q, nil, nil, nil)
}
