# shellcheck shell=bash
# Test networks of network namespaces on one bridge, shared by tests/faults and tests/ha.
#
#   netns_switch PREFIX            namespace PREFIX-sw holding bridge br0
#   netns_member PREFIX NAME IP    namespace PREFIX-NAME whose eth0 (IP/24) is cabled to br0
#
# Each returns non-zero with the failing step on stderr; the caller fails its own way.

netns_switch() {
    local sw=$1-sw
    ip netns add "$sw" || { echo "ip netns add $sw failed" >&2; return 1; }
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge || { echo "no bridge in $sw" >&2; return 1; }
    ip -n "$sw" link set br0 up
}

netns_member() {
    local sw=$1-sw name=$2 ip=$3 ns=$1-$2
    ip netns add "$ns" || { echo "ip netns add $ns failed" >&2; return 1; }
    ip -n "$ns" link set lo up
    ip link add eth0 netns "$ns" type veth peer name "sw-$name" netns "$sw" ||
        { echo "no veth for $name in $ns" >&2; return 1; }
    ip -n "$sw" link set "sw-$name" master br0 up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
}
