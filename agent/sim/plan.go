package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/meteor-edge/meteor/chaos"
)

// Link names: the link profiles a simulated device can have.
const (
	// LinkFiber is an urban store's wired uplink: about 1 ms, no loss.
	LinkFiber = "fiber"
	// LinkCellular is a rural kiosk's cellular modem: 20-80 ms round
	// trips, a few percent loss in each direction, short reorderings and
	// an outage of 8 s every 3 min.
	LinkCellular = "cellular"
	// LinkPopup is a pop-up site: a cellular-like link that is online for
	// about 20 min and then offline for about 30 min, half the time
	// because the site loses power (the agent is stopped abruptly and
	// restarted from its data directory).
	LinkPopup = "popup"
)

// MixRetail is the retail fleet mix: 60 % urban store devices (fiber, one
// store-gateway and five pos-terminals per store), 30 % rural kiosks
// (cellular, role=kiosk, link=cellular) and 10 % pop-up sites (popup),
// spread over the regions. Its default size is RetailDevices.
const MixRetail = "retail"

// RetailDevices is the size of the retail mix when Options.Devices is 0.
const RetailDevices = 1200

// Mixes returns the names Options.Profile accepts.
func Mixes() []string { return []string{LinkFiber, LinkCellular, LinkPopup, MixRetail} }

// Regions returns the regions of the simulated fleet. Server i of
// Options.Servers is taken to be in Regions()[i%3], the order in which
// `meteor dev` assigns regions.
func Regions() []string { return []string{"eu-west", "us-east", "ap-south"} }

// regionDelay is the one-way latency between two regions.
func regionDelay(a, b string) time.Duration {
	if a == b {
		return 2 * time.Millisecond
	}
	pair := map[[2]string]time.Duration{
		{"eu-west", "us-east"}:  40 * time.Millisecond,
		{"eu-west", "ap-south"}: 60 * time.Millisecond,
		{"us-east", "ap-south"}: 100 * time.Millisecond,
	}
	if d, ok := pair[[2]string{a, b}]; ok {
		return d
	}
	if d, ok := pair[[2]string{b, a}]; ok {
		return d
	}
	return 80 * time.Millisecond
}

// link is how one class of device reaches the servers.
type link struct {
	name string
	// base is the profile of every path; the region delay to each server
	// is added to its Delay. It applies in both directions.
	base chaos.LinkProfile
	// onlineFor and offlineFor are the mean online and offline periods of
	// a device that goes offline; zero means always online.
	onlineFor, offlineFor time.Duration
	// powerLoss is the probability that an offline period is a power
	// loss rather than a network blackhole.
	powerLoss float64
}

// linkByName returns a link scaled by scale (outage and offline periods
// are multiplied by it); loss, when positive, replaces the random loss of
// lossy links.
func linkByName(name string, scale, loss float64) (link, error) {
	sc := func(d time.Duration) time.Duration { return max(time.Duration(float64(d)*scale), time.Millisecond) }
	var l link
	switch name {
	case LinkFiber:
		l = link{base: chaos.LinkProfile{Delay: time.Millisecond, Jitter: 300 * time.Microsecond}}
	case LinkCellular:
		l = link{base: chaos.LinkProfile{
			Delay: 25 * time.Millisecond, Jitter: 15 * time.Millisecond,
			Loss: 0.03, BurstLoss: 0.002, BurstLen: 5, Reorder: 0.005, Duplicate: 0.001,
			OutageEvery: sc(3 * time.Minute), OutageFor: sc(8 * time.Second),
		}}
		if l.base.OutageFor >= l.base.OutageEvery {
			l.base.OutageFor = l.base.OutageEvery / 2
		}
	case LinkPopup:
		l = link{
			base:      chaos.LinkProfile{Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.01},
			onlineFor: sc(20 * time.Minute), offlineFor: sc(30 * time.Minute), powerLoss: 0.5,
		}
	default:
		return link{}, fmt.Errorf("sim: unknown link %q (known: %s, %s, %s)", name, LinkFiber, LinkCellular, LinkPopup)
	}
	l.name = name
	l.base.Dir = chaos.DirBoth
	if loss > 0 && l.base.Loss > 0 {
		l.base.Loss = loss
	}
	return l, l.base.Validate()
}

// devicePlan is everything about one simulated device that the seed and
// its index decide.
type devicePlan struct {
	id     string
	link   link
	labels map[string]string
	seed   uint64
}

func (p devicePlan) region() string { return p.labels["region"] }

// planFleet returns the plans of n devices of mix, spread over Regions()
// or all in onlyRegion if it is given. n 0 means RetailDevices for the retail
// mix and is an error otherwise.
func planFleet(prefix, mix string, n int, seed uint64, scale, loss float64, onlyRegion string) ([]devicePlan, error) {
	if n == 0 && mix == MixRetail {
		n = RetailDevices
	}
	if n <= 0 {
		return nil, fmt.Errorf("sim: %d devices: need at least one", n)
	}
	links := map[string]link{}
	for _, name := range []string{LinkFiber, LinkCellular, LinkPopup} {
		l, err := linkByName(name, scale, loss)
		if err != nil {
			return nil, err
		}
		links[name] = l
	}
	if mix != MixRetail {
		if _, ok := links[mix]; !ok {
			return nil, fmt.Errorf("sim: unknown profile %q (known: %v)", mix, Mixes())
		}
	}
	regions := Regions()
	if onlyRegion != "" {
		regions = []string{onlyRegion}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	plans := make([]devicePlan, 0, n)
	var stores, kiosks, popups int
	for i := range n {
		class := mix
		if mix == MixRetail {
			switch i % 10 {
			case 6, 7, 8:
				class = LinkCellular
			case 9:
				class = LinkPopup
			default:
				class = LinkFiber
			}
		}
		var site, role string
		var region string
		switch class {
		case LinkFiber:
			// Six devices per store: a gateway and five tills.
			store := stores / 6
			site, role, region = fmt.Sprintf("store-%04d", store), "pos-terminal", regions[store%len(regions)]
			if stores%6 == 0 {
				role = "store-gateway"
			}
			stores++
		case LinkCellular:
			site, role, region = fmt.Sprintf("kiosk-%04d", kiosks), "kiosk", regions[kiosks%len(regions)]
			kiosks++
		case LinkPopup:
			// Two tills per pop-up site.
			s := popups / 2
			site, role, region = fmt.Sprintf("popup-%04d", s), "pos-terminal", regions[s%len(regions)]
			popups++
		}
		plans = append(plans, devicePlan{
			id:     fmt.Sprintf("%s-%s-%04d", prefix, class, i),
			link:   links[class],
			labels: map[string]string{"region": region, "site": site, "role": role, "link": class},
			seed:   rng.Uint64(),
		})
	}
	return plans, nil
}
