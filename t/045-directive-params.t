# The name=value parameters of kvserve_kv_pool, kvserve_kv_tier,
# kvserve_lora and kvserve_route, and the edges of those of
# kvserve_limit_zone, kvserve_guard_zone, kvserve_guard, kvserve_index
# and kvserve_model (all read by ngx_http_kvserve_param.h), through
# `nginx -t` only: no nginx is started, no engine spawned.
#
#   - a parameter is name=value only with its '=': the bare name, an
#     empty value where one is needed, a parameter given twice where it
#     may be given once, and an unknown name are refused, each error
#     naming the whole parameter as written (kvserve_lora takes one
#     parameter at most: nginx counts its arguments);
#   - the same parameters, well formed, pass (so the value read is the
#     one after the '=': model=m names the model served as "m", upstream=
#     the upstream that routes).
#   - a value that must be one of a few words is that word exactly;
#     rate= and kv_rate= too short for their unit are refused, also after
#     a rate= that set the unit.
# The directives' other errors are 040-kv-pools.t's, 042-lora.t's,
# 043-kv-tier.t's, 044-route-resv.t's, 013-limit.t's, 016-fair.t's,
# 037-guard.t's, 019-index.t's and 028-engine-per-model.t's.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;

my $t = Kvserve::Live->new('045-directive-params');
my $model = $t->model_dir . "/default.gguf";
my $root = $t->root;
my $file = "$root/kv.tier";

my $pool = "kvserve_model m $model;\nkvserve_kv_pool long";
my $tier = "kvserve_model m $model;\nkvserve_kv_tier disk $file 1m";
my $lora = "kvserve_model m $model;\nkvserve_lora A $root/a.gguf";

# a gateway (its model's tokenizer) routing to an upstream u balanced by
# prefix
sub route {
    my ($params) = @_;
    return "kvserve_model m $model;\n"
           . "upstream u { kvserve_prefix_balance; server 127.0.0.1:1; }\n"
           . "server { listen 127.0.0.1:1; location / {\n"
           . "    kvserve_route $params; proxy_pass http://u; } }";
}

for my $c (
    # kvserve_kv_pool
    ["$pool min_tokens share=0.5 max_prefill=1;",
     qr/invalid parameter "min_tokens" in "kvserve_kv_pool" directive, it must be min_tokens=<N>, share=<fraction>, max_prefill=<K> or chunk=<T>/],
    ["$pool min_tokens= share=0.5 max_prefill=1;",
     qr/invalid value "min_tokens=" in "kvserve_kv_pool" directive, min_tokens must be a number of tokens of at least 1/],
    ["$pool min_tokens=8 share= max_prefill=1;",
     qr/invalid value "share=" in "kvserve_kv_pool" directive, share must be a fraction/],
    ["$pool min_tokens=8 share=0.5 max_prefill=1 chunk=5x;",
     qr/invalid value "chunk=5x" in "kvserve_kv_pool" directive, chunk must be a number of tokens of at least 1/],
    ["$pool min_tokens=8 share=0.5 max_prefill=1 chunks=5;",
     qr/invalid parameter "chunks=5" in "kvserve_kv_pool" directive/],

    # kvserve_kv_tier
    ["$tier model=;",
     qr/invalid value "model=" in "kvserve_kv_tier" directive, it must be one "model=NAME"/],
    ["$tier model=m model=m;",
     qr/invalid value "model=m" in "kvserve_kv_tier" directive, it must be one "model=NAME"/],
    ["$tier models=m;",
     qr/invalid value "models=m" in "kvserve_kv_tier" directive/],
    ["$tier model=mm;", qr/no model "mm" is served/],

    # kvserve_lora (refused before the adapter file is read)
    ["$lora base=;",
     qr/kvserve_lora "A": invalid parameter "base="; it takes base=MODEL once/],
    ["$lora basis=m;",
     qr/kvserve_lora "A": invalid parameter "basis=m"/],

    # kvserve_route
    [route('timeout=0'),
     qr/kvserve_route: "timeout=0": expected a time over 0, such as timeout=50ms/],
    [route('timeout='),
     qr/kvserve_route: "timeout=": expected a time over 0/],
    [route('reserve_ttl=2h'),
     qr/kvserve_route: "reserve_ttl=2h": expected a time from 100ms to 1h/],
    [route('redis='),
     qr/invalid value "redis=" in "kvserve_route" directive/],
    [route('upstream='),
     qr/kvserve_route: unknown parameter "upstream=" \(redis=<host:port>, mode=index\|approximate, timeout=<time>, reserve_ttl=<time>, upstream=<name>\)/],
    [route('timeouts=5s'),
     qr/kvserve_route: unknown parameter "timeouts=5s"/],

    # kvserve_limit_zone, kvserve_limit
    ['kvserve_limit_zone zone=z:1m rate=5;', qr/invalid rate "rate=5"/],
    ['kvserve_limit_zone zone=z:1m rate=10t/s rate=5;',
     qr/invalid rate "rate=5"/],
    ['kvserve_limit_zone zone=z:1m rate=10t/s kv_rate=/s;',
     qr/invalid kv_rate "kv_rate=\/s"/],
    ['kvserve_limit_zone zone=:1m rate=10t/s;',
     qr/invalid zone size "zone=:1m"/],
    ['kvserve_limit zone=;', qr/invalid zone "zone="/],
    ['kvserve_limit zone=z empty=share;',
     qr/invalid empty value "empty=share": shared, reject or unlimited/],
    ['kvserve_limit zone=z empty=sharedd;',
     qr/invalid empty value "empty=sharedd"/],

    # kvserve_guard_zone, kvserve_guard
    ['kvserve_guard_zone g patterns=;',
     qr/invalid parameter "patterns=" in "kvserve_guard_zone": it takes patterns=FILE/],
    ['kvserve_guard_zone g patterns;',
     qr/invalid parameter "patterns" in "kvserve_guard_zone"/],
    ['kvserve_guard input=of;',
     qr/invalid parameter "input=of" in "kvserve_guard": it takes zone=NAME, input=reject\|off, output=stop\|redact\|off/],
    ['kvserve_guard output=offf;',
     qr/invalid parameter "output=offf" in "kvserve_guard"/],
    ['kvserve_guard zone=;', qr/unknown guard zone "" in "kvserve_guard"/],
    ['kvserve_guard input=off output=redact;',
     qr/"kvserve_guard" needs zone=NAME/],

    # kvserve_index
    ['kvserve_index redis=127.0.0.1:6379 ttl=1ms;',
     qr/invalid value "ttl=1ms" in "kvserve_index" directive: a time of at least 1000ms is needed/],
    ['kvserve_index redis=127.0.0.1:6379 heartbeat=;',
     qr/invalid value "heartbeat=" in "kvserve_index" directive: a time of at least 10ms/],
    ['kvserve_index redis=127.0.0.1:6379 advertise=;',
     qr/invalid value "advertise=" in "kvserve_index" directive: an http:\/\/ or https:\/\/ URL/],
    ['kvserve_index redis=127.0.0.1:6379 ttls=5s;',
     qr/invalid parameter "ttls=5s" in "kvserve_index" directive/],
    ['kvserve_index ttl=5s;', qr/"kvserve_index" needs redis=<host:port>/],

    # kvserve_model: kv_cache= needs its value
    ["kvserve_model m $model kv_cache=;",
     qr/kvserve_model "m": unknown parameter "kv_cache=" \(known: kv_cache=SIZE\|FRACTION, chat_template=NAME\|FILE\)/],
    ["kvserve_model m $model kv_cache;",
     qr/kvserve_model "m": unknown parameter "kv_cache"/],
) {
    my ($failed, $out) = $t->nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]") or diag($out);
}

for my $good (
    "$pool min_tokens=8 share=0.5 max_prefill=1 chunk=16;",
    "$tier model=m load=always;",
    route('redis=127.0.0.1:6379 mode=approximate timeout=20ms '
          . 'reserve_ttl=5s upstream=u'),
) {
    my ($failed, $out) = $t->nginx_t($good);
    ok(!$failed, "nginx -t passes: $good") or diag($out);
}

done_testing();
