//! Which IP addresses are public: the one check for anything runbox
//! connects to on a user's behalf (the api's callbacks, the worker's egress proxy).
//!
//! [`refusal`] looks an address up in [`IPV4`] or [`IPV6`], tables of
//! special-purpose blocks, and the most specific block that holds it
//! decides, as in the registries, where a block inside a larger one
//! overrides it (`192.0.0.9/32` is reachable inside `192.0.0.0/24`, which is
//! not). An address in no block is public.
//!
//! - The tables copy the IANA IPv4 and IPv6 Special-Purpose Address
//!   Registries, every row: a block is public only if its "Globally
//!   Reachable" is True; False, N/A and the empty cells of a terminated
//!   block are refused.
//! - A block that embeds an IPv4 address (IPv4-compatible, NAT64, 6to4,
//!   Teredo, and the IPv4 relays for them) is refused outright rather than
//!   unwrapped: a translator or relay would carry the connection to an
//!   address this check never saw. The one exception is IPv4-mapped
//!   `::ffff:a.b.c.d`, which never leaves the host as such: it is judged
//!   by its IPv4 address.
//! - A few rows come from outside those registries, each marked: multicast,
//!   deprecated IPv4-compatible and site-local addresses, and all IPv6
//!   outside `2000::/3`, the only space IANA allocates as global unicast.
//!
//! The table is written here rather than taken from a crate: std's
//! `IpAddr::is_global` is unstable, and the crates that offer one
//! (`ip_network`, `ip_rfc`) have not been released for years, miss recent
//! blocks (`3fff::/20`, `5f00::/16`, `100:0:0:1::/64`) and take
//! global-scope multicast for public.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP network: an address and a prefix length.
#[derive(Debug, Clone, Copy)]
pub struct Network {
    addr: IpAddr,
    prefix: u32,
}

impl Network {
    /// Parses `10.0.0.0/8`, `fd00::/8`, or a bare address (one host).
    pub fn parse(text: &str) -> Option<Network> {
        let (addr, prefix) = text.split_once('/').map_or((text, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.parse().ok()?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse().ok().filter(|p| *p <= bits)?,
            None => bits,
        };
        Some(Network { addr, prefix })
    }

    /// Whether `ip` is in this network. An IPv4 network holds no IPv6
    /// address, not even an IPv4-mapped one, and the other way round.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let mask = |bits: u32, width: u32| if bits == 0 { 0 } else { u128::MAX << (width - bits) };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let m = mask(self.prefix, 32);
                (u128::from(u32::from(net)) & m) == (u128::from(u32::from(ip)) & m)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let m = mask(self.prefix, 128);
                (u128::from(net) & m) == (u128::from(ip) & m)
            }
            _ => false,
        }
    }
}

/// Why `ip` is not an ordinary public address, one a connection made on a
/// user's behalf may go to: the name of the block that holds it. `None`
/// if it is public.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    most_specific(ip).filter(|block| matches!(block.verdict, Verdict::Refused)).map(|block| block.name)
}

/// The smallest block in the tables that holds `ip`, taken as it is (an
/// IPv4-mapped address is found in `::ffff:0:0/96`).
fn most_specific(ip: IpAddr) -> Option<&'static Block> {
    let table = if ip.is_ipv4() { IPV4 } else { IPV6 };
    table.iter().filter(|block| block.network.contains(ip)).max_by_key(|block| block.network.prefix)
}

/// A special-purpose block and what the check says about it.
struct Block {
    network: Network,
    verdict: Verdict,
    /// The registry's name for it, with the RFC that defines it.
    name: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Public,
    Refused,
}
use Verdict::{Public, Refused};

const fn v4(octets: [u8; 4], prefix: u32, verdict: Verdict, name: &'static str) -> Block {
    let [a, b, c, d] = octets;
    Block { network: Network { addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix }, verdict, name }
}

const fn v6(s: [u16; 8], prefix: u32, verdict: Verdict, name: &'static str) -> Block {
    let addr = Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
    Block { network: Network { addr: IpAddr::V6(addr), prefix }, verdict, name }
}

/// The IANA IPv4 Special-Purpose Address Registry (iana-ipv4-special-registry),
/// all 25 rows as of 2025-10-09, plus multicast.
static IPV4: &[Block] = &[
    v4([0, 0, 0, 0], 8, Refused, "\"this network\" (RFC 791)"),
    v4([0, 0, 0, 0], 32, Refused, "\"this host on this network\" (RFC 1122)"),
    v4([10, 0, 0, 0], 8, Refused, "private-use (RFC 1918)"),
    v4([100, 64, 0, 0], 10, Refused, "shared address space (RFC 6598)"),
    v4([127, 0, 0, 0], 8, Refused, "loopback (RFC 1122)"),
    v4([169, 254, 0, 0], 16, Refused, "link-local (RFC 3927)"),
    v4([172, 16, 0, 0], 12, Refused, "private-use (RFC 1918)"),
    v4([192, 0, 0, 0], 24, Refused, "IETF protocol assignments (RFC 6890)"),
    v4([192, 0, 0, 0], 29, Refused, "IPv4 service continuity prefix (RFC 7335)"),
    v4([192, 0, 0, 8], 32, Refused, "IPv4 dummy address (RFC 7600)"),
    v4([192, 0, 0, 9], 32, Public, "Port Control Protocol anycast (RFC 7723)"),
    v4([192, 0, 0, 10], 32, Public, "TURN anycast (RFC 8155)"),
    v4([192, 0, 0, 170], 32, Refused, "NAT64/DNS64 discovery (RFC 8880)"),
    v4([192, 0, 0, 171], 32, Refused, "NAT64/DNS64 discovery (RFC 8880)"),
    v4([192, 0, 2, 0], 24, Refused, "documentation, TEST-NET-1 (RFC 5737)"),
    v4([192, 31, 196, 0], 24, Public, "AS112-v4 (RFC 7535)"),
    v4([192, 52, 193, 0], 24, Public, "AMT (RFC 7450)"),
    v4([192, 88, 99, 0], 24, Refused, "deprecated 6to4 relay anycast (RFC 7526)"),
    v4([192, 88, 99, 2], 32, Refused, "6a44 relay anycast (RFC 6751)"),
    v4([192, 168, 0, 0], 16, Refused, "private-use (RFC 1918)"),
    v4([192, 175, 48, 0], 24, Public, "direct delegation AS112 service (RFC 7534)"),
    v4([198, 18, 0, 0], 15, Refused, "benchmarking (RFC 2544)"),
    v4([198, 51, 100, 0], 24, Refused, "documentation, TEST-NET-2 (RFC 5737)"),
    v4([203, 0, 113, 0], 24, Refused, "documentation, TEST-NET-3 (RFC 5737)"),
    v4([240, 0, 0, 0], 4, Refused, "reserved (RFC 1112)"),
    v4([255, 255, 255, 255], 32, Refused, "limited broadcast (RFC 919)"),
    // Not in the registry: multicast (IANA IPv4 Multicast Address Space).
    v4([224, 0, 0, 0], 4, Refused, "multicast (RFC 5771)"),
];

/// The IANA IPv6 Special-Purpose Address Registry (iana-ipv6-special-registry),
/// all 25 rows as last updated on 2025-10-09, inside what the IANA IPv6
/// Address Space registry allocates, plus three deprecated or multicast blocks.
static IPV6: &[Block] = &[
    // IANA IPv6 Address Space: global unicast is 2000::/3; the rest is
    // reserved by the IETF, or one of the blocks below.
    v6([0, 0, 0, 0, 0, 0, 0, 0], 0, Refused, "outside global unicast 2000::/3 (RFC 4291)"),
    v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, Public, "global unicast (RFC 4291)"),
    // The registry.
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, Refused, "loopback (RFC 4291)"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, Refused, "unspecified (RFC 4291)"),
    // Judged by its IPv4 address before the table is consulted.
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, Refused, "IPv4-mapped (RFC 4291)"),
    // Globally Reachable: True, but it wraps an IPv4 address.
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, Refused, "NAT64 well-known prefix (RFC 6052)"),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Refused, "local-use IPv4/IPv6 translation (RFC 8215)"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Refused, "discard-only (RFC 6666)"),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, Refused, "dummy IPv6 prefix (RFC 9780)"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, Refused, "IETF protocol assignments (RFC 2928)"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Refused, "Teredo (RFC 4380)"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, Public, "Port Control Protocol anycast (RFC 7723)"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, Public, "TURN anycast (RFC 8155)"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, Public, "DNS-SD service registration anycast (RFC 9665)"),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, Refused, "benchmarking (RFC 5180)"),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, Public, "AMT (RFC 7450)"),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, Public, "AS112-v6 (RFC 7535)"),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, Refused, "deprecated ORCHID (RFC 4843)"),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, Public, "ORCHIDv2 (RFC 7343)"),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, Public, "drone remote ID entity tags (RFC 9374)"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Refused, "documentation (RFC 3849)"),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, Refused, "6to4 (RFC 3056)"),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, Public, "direct delegation AS112 service (RFC 7534)"),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Refused, "documentation (RFC 9637)"),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, Refused, "SRv6 SIDs (RFC 9602)"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Refused, "unique-local (RFC 4193)"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Refused, "link-local (RFC 4291)"),
    // Not in the registry.
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, Refused, "IPv4-compatible, deprecated (RFC 4291)"),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Refused, "site-local, deprecated (RFC 3879)"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Refused, "multicast (RFC 4291)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn is_public(ip: IpAddr) -> bool {
        refusal(ip).is_none()
    }

    /// One address inside each block, and whether it is public, written
    /// down from the registries rather than read from the tables.
    const INSIDE: &[(&str, bool)] = &[
        ("0.1.2.3", false),
        ("0.0.0.0", false),
        ("10.1.2.3", false),
        ("100.64.0.1", false),
        ("100.127.255.255", false),
        ("127.0.0.1", false),
        ("127.255.255.254", false),
        ("169.254.169.254", false),
        ("172.16.0.1", false),
        ("172.31.255.255", false),
        ("192.0.0.200", false),
        ("192.0.0.11", false),
        ("192.0.0.1", false),
        ("192.0.0.8", false),
        ("192.0.0.9", true),
        ("192.0.0.10", true),
        ("192.0.0.170", false),
        ("192.0.0.171", false),
        ("192.0.2.1", false),
        ("192.31.196.1", true),
        ("192.52.193.1", true),
        ("192.88.99.1", false),
        ("192.88.99.2", false),
        ("192.168.1.1", false),
        ("192.175.48.6", true),
        ("198.18.0.1", false),
        ("198.19.255.255", false),
        ("198.51.100.7", false),
        ("203.0.113.9", false),
        ("240.0.0.1", false),
        ("255.255.255.254", false),
        ("255.255.255.255", false),
        ("224.0.0.251", false),
        ("239.255.255.250", false),
        ("4000::1", false),
        ("1::", false),
        ("::ffff:0:808:808", false), // IPv4-translated (RFC 2765): not mapped
        ("2606:4700:4700::1111", true),
        ("::1", false),
        ("::", false),
        ("::ffff:10.0.0.1", false),
        ("::ffff:8.8.8.8", true),
        ("64:ff9b::808:808", false), // 8.8.8.8, refused all the same
        ("64:ff9b:1::a00:1", false),
        ("100::1", false),
        ("100:0:0:1::1", false),
        ("2001:100::1", false),
        ("2001:1::4", false),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", false),
        ("2001:1::1", true),
        ("2001:1::2", true),
        ("2001:1::3", true),
        ("2001:2::1", false),
        ("2001:3::1", true),
        ("2001:4:112::1", true),
        ("2001:10::1", false),
        ("2001:20::1", true),
        ("2001:30::1", true),
        ("2001:db8::1", false),
        ("2002:808:808::1", false), // 6to4 of 8.8.8.8
        ("2620:4f:8000::6", true),
        ("3fff::1", false),
        ("3fff:fff:ffff::1", false),
        ("5f00::1", false),
        ("fc00::1", false),
        ("fd00::1", false),
        ("fe80::1", false),
        ("::8.8.8.8", false),
        ("::127.0.0.1", false),
        ("fec0::1", false),
        ("ff02::1", false),
        ("ff0e::1", false),
    ];

    #[test]
    fn each_block_decides_the_address_inside_it() {
        for &(text, public) in INSIDE {
            assert_eq!(is_public(ip(text)), public, "{text}: {:?}", refusal(ip(text)));
        }
    }

    #[test]
    fn every_block_has_an_address_of_its_own_in_the_test() {
        for block in IPV4.iter().chain(IPV6) {
            let probed = INSIDE.iter().any(|(text, _)| most_specific(ip(text)).is_some_and(|b| std::ptr::eq(b, block)));
            assert!(
                probed,
                "no address in INSIDE lands in {}/{} ({})",
                block.network.addr, block.network.prefix, block.name
            );
        }
    }

    #[test]
    fn real_public_addresses_pass() {
        for text in [
            "1.1.1.1",
            "8.8.8.8",
            "9.9.9.9",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2620:fe::fe",
            "::ffff:1.1.1.1",
        ] {
            assert!(is_public(ip(text)), "{text}: {:?}", refusal(ip(text)));
        }
    }

    #[test]
    fn addresses_just_outside_a_block_pass() {
        for text in [
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "191.255.255.255",
            "192.0.1.0",
            "192.0.3.0",
            "192.88.98.255",
            "192.88.100.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
            "2000::1",
            "2001:200::1",
            "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db9::",
            "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2003::1",
            "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "3fff:1000::",
            "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            assert!(is_public(ip(text)), "{text}: {:?}", refusal(ip(text)));
        }
        // The other side of those edges, inside a larger refused block.
        for text in [
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:1::",
            "2001:2:1::",
            "2001:4::1",
            "2001:4:113::",
            "2001:40::",
        ] {
            assert!(!is_public(ip(text)), "{text}");
        }
    }

    #[test]
    fn a_refusal_names_the_block() {
        assert_eq!(refusal(ip("10.0.0.1")), Some("private-use (RFC 1918)"));
        assert_eq!(refusal(ip("::ffff:127.0.0.1")), Some("loopback (RFC 1122)"));
        assert_eq!(refusal(ip("64:ff9b::808:808")), Some("NAT64 well-known prefix (RFC 6052)"));
        assert_eq!(refusal(ip("8.8.8.8")), None);
    }

    #[test]
    fn networks_parse_and_hold_only_their_own_family() {
        let net = Network::parse("10.0.0.0/8").expect("parses");
        assert!(net.contains(ip("10.255.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::ffff:10.0.0.1")));
        let host = Network::parse("fd00::1").expect("parses");
        assert!(host.contains(ip("fd00::1")) && !host.contains(ip("fd00::2")));
        assert!(Network::parse("::/0").expect("parses").contains(ip("2606:4700::1")));
        assert!(Network::parse("10.0.0.0/33").is_none());
        assert!(Network::parse("::/129").is_none());
        assert!(Network::parse("example.com").is_none());
    }
}
