/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package framework

import (
	"context"
	"time"
)

// Node is a node a test fails and brings back, whatever runs it: a KWOK
// node beside the processes Product.StartNode started for it (the mock's
// node plugin, a simulated kubelet, the node agent), or a real node with
// its own kubelet and containerd (StartRealNodes). A test says which nodes
// it needs and what happens to them; how a KWOK node or a real one fails is
// the framework's.
type Node interface {
	Name() string
	// PowerOff cuts the machine's power: its heartbeat stops, and so does
	// everything that ran on it, at once.
	PowerOff(ctx context.Context) error
	// PowerOn boots it: its kubelet, driver plugins and node agent start
	// again as after a reboot. It returns once the node is Ready.
	PowerOn(ctx context.Context) error
	// Partition cuts it off the control plane. On a real node everything
	// keeps running; on a KWOK node its heartbeat, simulated kubelet and
	// node agent stop while its node plugin keeps serving (a workload on
	// it keeps writing).
	Partition(ctx context.Context) error
	// Heal connects it again, and returns without waiting for the node
	// to turn Ready (a real node powered off meanwhile stays down). A
	// real node's processes carry on; a KWOK node's kubelet and node
	// agent, which Partition stopped, start again as after a reboot.
	Heal(ctx context.Context) error
}

// nodeReadyTimeout bounds PowerOn.
const nodeReadyTimeout = 60 * time.Second

// Node returns node name as a test fails it: a real node if StartRealNodes
// started it, else a KWOK node of which only the heartbeat is the
// framework's (no process of it was started here).
func (c *Cluster) Node(name string) Node {
	if n := c.realNode(name); n != nil {
		return realNodeOf{c: c, n: n}
	}
	return kwokNode{c: c, name: name}
}

// Node returns node name as a test fails it: a real node, or a KWOK node
// with the processes StartNode started for it.
func (p *Product) Node(name string) Node {
	if n := p.c.realNode(name); n != nil {
		return realNodeOf{c: p.c, n: n}
	}
	return kwokNode{c: p.c, p: p, name: name}
}

// kwokNode is a KWOK node; p, when set, started its processes.
type kwokNode struct {
	c    *Cluster
	p    *Product
	name string
}

func (k kwokNode) Name() string { return k.name }

func (k kwokNode) instance() *NodeInstance {
	if k.p == nil {
		return nil
	}
	return k.p.Nodes[k.name]
}

func (k kwokNode) PowerOff(ctx context.Context) error {
	if err := k.c.ShutDown(ctx, k.name); err != nil {
		return err
	}
	if inst := k.instance(); inst != nil {
		inst.PowerOff()
	}
	return nil
}

func (k kwokNode) PowerOn(ctx context.Context) error {
	if err := k.Heal(ctx); err != nil {
		return err
	}
	return k.c.WaitNodeReady(ctx, k.name, true, nodeReadyTimeout)
}

func (k kwokNode) Partition(ctx context.Context) error {
	if err := k.c.ShutDown(ctx, k.name); err != nil {
		return err
	}
	if inst := k.instance(); inst != nil {
		inst.Partition()
	}
	return nil
}

func (k kwokNode) Heal(ctx context.Context) error {
	if err := k.c.BringBack(ctx, k.name); err != nil {
		return err
	}
	if inst := k.instance(); inst != nil {
		inst.PowerOff()
		return k.p.PowerOn(ctx, k.name)
	}
	return nil
}

// realNodeOf is a real node.
type realNodeOf struct {
	c *Cluster
	n *RealNode
}

func (r realNodeOf) Name() string { return r.n.Name }

func (r realNodeOf) PowerOff(ctx context.Context) error { return r.c.PowerOff(ctx, r.n) }

func (r realNodeOf) PowerOn(ctx context.Context) error {
	return r.c.PowerOn(ctx, r.n, PowerOnOptions{})
}

func (r realNodeOf) Partition(ctx context.Context) error { return r.c.partitionReal(ctx, r.n) }

func (r realNodeOf) Heal(ctx context.Context) error { return r.c.healReal(ctx, r.n) }
