# Long-pool reservations across hosts (issue 24 point 3; docs/pools.md
# "Across hosts"): a real redis-server, three engine hosts publishing
# their long KV pool's room in their host records, and two gateway
# nginx instances reserving that room with the Lua script.
#
# e1 has a long pool with room for one long request at a time (one
# prefill slot); e2 and e3 have long pools too small for the test's long
# requests (their records show less room than the need).  Checked:
#   1. the records carry lmin, lroom and lslots as configured;
#   2. a long request goes to the host with room (e1), every time, and
#      its reservation is given back when it ends;
#   3. eight concurrent long requests, four through each gateway: exactly
#      one wins the slot, the seven others are 503 kv_pool_full with
#      Retry-After; at no sample does Redis hold two reservations; e1
#      admitted exactly the winners (its kv_pool_admitted_total) and the
#      gateways' won and lost counters add up;
#   4. a reservation nobody uses (a gateway that died, planted by hand)
#      keeps the slot until its expiry, then the next take drops it
#      (counted expired) and a long request goes through;
#   5. nothing is left in Redis but keys with a TTL (and the hosts set);
#   6. `nginx -t` names a bad reserve_ttl.
#
# Skips when redis-server is not installed.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Cluster;
use JSON::PP ();
use Time::HiRes qw(sleep time);

my $c = Kvserve::Cluster->new('042');
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
my $name = 'kvserve-tiny';

my @eng = map { $c->live("e$_") } 1 .. 3;
my @gw = map { $c->live("g$_") } 1 .. 2;
my %host_of_port = map { ($eng[$_]->port => "e" . ($_ + 1)) } 0 .. 2;

END { $c->stop if $c }

# 1m of cache, blocks of 16 tokens.  Long from 64 tokens; e1's long pool
# may hold half the blocks, one prefill at a time; e2's and e3's 2%: a
# few blocks, less than a long request here needs (10).
my @share = (0.5, 0.02, 0.02);
for my $i (0 .. 2) {
    my $e = $eng[$i];
    $e->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model $name $model;
    kvserve_kv_cache 1m;
    kvserve_kv_block 16;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_kv_pool long min_tokens=64 share=$share[$i] max_prefill=1;
    kvserve_index redis=@{[ $c->redis_addr ]} host_id=e@{[ $i + 1 ]}
                  advertise=http://127.0.0.1:@{[ $e->port ]};
EOC
        location /v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
EOS
}

my $servers = join '', map { "        server 127.0.0.1:" . $_->port . ";\n" }
                           @eng;
for my $g (@gw) {
    $g->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model $name $model;

    upstream engines {
        kvserve_prefix_balance;
$servers    }
EOC
        location /v1/ {
            # a lookup slower than timeout= routes as without pools
            # (docs/pools.md, "Redis down"): the default 50ms is met on
            # a loaded 2-core runner, and the race below then sends long
            # requests to e2/e3 (400) instead of testing reservations
            kvserve_route redis=@{[ $c->redis_addr ]} reserve_ttl=3s
                          timeout=2s;
            proxy_pass http://engines;
            add_header X-Route-Host \$kvserve_route_host always;
            add_header X-Upstream \$upstream_addr always;
        }
        location = /metrics { kvserve_metrics; }
EOS
}

ok($c->redis_start, 'redis-server started on ' . $c->redis_addr);
for my $i (0 .. 2) {
    ok($eng[$i]->start, 'engine host e' . ($i + 1) . ' started');
}
ok($_->start, 'gateway started') for @gw;

sub record {
    my ($id) = @_;
    my $v = $c->redis('GET', "kvs:v1:host:$id") // '';
    my %f = map { split /=/, $_, 2 } grep { /=/ } split / /, $v;
    return \%f;
}

ok($gw[0]->wait_for(sub {
       3 == grep { defined record($_)->{lroom} } qw(e1 e2 e3)
   }, 20), 'e1, e2 and e3 publish their long pools');

# a gateway worker whose table lacks the hosts routes as without pools
for my $i (0 .. 1) {
    ok($gw[$i]->wait_for(sub { $gw[$i]->workers_listing(3) >= 2 }, 20),
       'gateway g' . ($i + 1) . ': both workers list the three hosts');
}

# --- 1. the records -------------------------------------------------------------

my $r1 = record('e1');
my $r2 = record('e2');
is($r1->{lmin}, 64, 'e1: lmin=64');
is($r1->{lslots}, 1, 'e1: one free prefill slot');
cmp_ok($r1->{lroom}, '>=', 20, "e1: lroom=$r1->{lroom}");
cmp_ok($r2->{lroom}, '<', 10, "e2: lroom=$r2->{lroom}, under a long need");

# --- requests ---------------------------------------------------------------------

my $json = JSON::PP->new->canonical;

# A long request: ~20 prompt tokens + 140 = 160 tokens, 10 blocks.
sub long_req {
    my ($tag) = @_;
    return $json->encode({ model => $name, prompt => "Long request $tag.",
                           max_tokens => 140, ignore_eos => JSON::PP::true,
                           temperature => 0 });
}

sub read_resp {
    my ($g, $s) = @_;
    my ($head, $body) = $g->split_response($g->read_all($s, 60));
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my ($up) = $head =~ /^X-Upstream: *(.*?)\r?$/mi;
    my ($port) = ($up // '') =~ /:(\d+)$/;
    my ($ra) = $head =~ /^Retry-After: *(\d+)/mi;
    return { status => $status // 0, host => $host_of_port{$port // 0} // '',
             retry => $ra, body => eval { $json->decode($body) },
             raw => $body };
}

sub metric {
    my ($g, $m) = @_;
    my ($h, $b) = $g->split_response(
        $g->read_all($g->request('GET', '/metrics'), 10));
    return $b =~ /^kvserve:\Q$m\E\{model_name="kvserve-tiny"\} (\d+)$/m
           ? $1 : -1;
}

sub long_admitted {
    my ($h, $b) = $eng[0]->split_response(
        $eng[0]->read_all($eng[0]->request('GET', '/metrics'), 10));
    return $b =~ /^kvserve:kv_pool_admitted_total\{model_name="kvserve-tiny",pool="long"\} (\d+)$/m
           ? $1 : -1;
}

sub resv_count { return $c->redis('ZCARD', 'kvs:v1:resv:e1') // -1 }

# --- 2. a long request goes to the host with room ---------------------------

my $adm0 = long_admitted();
for my $k (1 .. 3) {
    my $g = $gw[$k % 2];
    # the record of the slot freed by the previous one may lag a beat
    my $r;
    ok($g->wait_for(sub {
           $r = read_resp($g, $g->request('POST', '/v1/completions',
                                          long_req("seq $k")));
           return $r->{status} != 503;
       }, 10), "long request $k: not refused");
    is($r->{status}, 200, "long request $k: 200") or diag($r->{raw});
    is($r->{host}, 'e1', "long request $k: served by e1, the host with room");
}
is(long_admitted() - $adm0, 3, 'e1 admitted the three long requests');
is(resv_count(), 0, 'their reservations were released');

# a short request still goes anywhere (not asserted where), unreserved
my $rs = read_resp($gw[0], $gw[0]->request('POST', '/v1/completions',
    $json->encode({ model => $name, prompt => 'Short.', max_tokens => 2 })));
is($rs->{status}, 200, 'a short request: 200');

# --- 3. two gateways race for the last slot -----------------------------------

# the slot free again in e1's record
ok($gw[0]->wait_for(sub { (record('e1')->{lslots} // 0) == 1 }, 10),
   "e1's record shows its slot free");
my $won0 = metric($gw[0], 'route_pool_reservations_won_total')
           + metric($gw[1], 'route_pool_reservations_won_total');
my $lost0 = metric($gw[0], 'route_pool_reservations_lost_total')
            + metric($gw[1], 'route_pool_reservations_lost_total');
$adm0 = long_admitted();

my @socks = map { [ $gw[$_ % 2], $gw[$_ % 2]->request('POST',
                    '/v1/completions', long_req("race $_")) ] } 1 .. 8;
my $max_held = 0;
for (1 .. 20) {
    my $n = resv_count();
    $max_held = $n if $n > $max_held;
    sleep 0.01;
}
my @race = map { read_resp(@$_) } @socks;
my @ok = grep { $_->{status} == 200 } @race;
my @full = grep { $_->{status} == 503 } @race;

is(scalar @ok, 1, 'exactly one of eight racing long requests won')
    or diag(join ', ', map { $_->{status} } @race);
is(scalar @full, 7, 'the seven others: 503');
is(scalar(grep { ($_->{body}{error}{code} // '') eq 'kv_pool_full'
                 && ($_->{retry} // 0) == 3 } @full), 7,
   '... kv_pool_full, Retry-After the reservation TTL (3 s)')
    or diag($full[0]{raw});
is($ok[0]{host}, 'e1', 'the winner went to e1') if @ok;
cmp_ok($max_held, '<=', 1, "Redis never held two reservations ($max_held "
                           . "at most)");
is(long_admitted() - $adm0, scalar @ok, 'e1 admitted exactly the winner');
my $won = metric($gw[0], 'route_pool_reservations_won_total')
          + metric($gw[1], 'route_pool_reservations_won_total') - $won0;
my $lost = metric($gw[0], 'route_pool_reservations_lost_total')
           + metric($gw[1], 'route_pool_reservations_lost_total') - $lost0;
is($won, 1, 'the gateways counted one reservation won');
cmp_ok($lost, '<=', 7, "... and $lost lost (the others found no room in "
                       . 'the records first)');
is(resv_count(), 0, 'no reservation left once the winner ended');

# --- 4. an unused reservation expires -------------------------------------------

# what a gateway that died after reserving leaves: a member 1.5 s from
# expiry (Redis' clock), the key living longer
my ($sec, $usec) = $c->redis('TIME');
my $exp = $sec * 1000 + int($usec / 1000) + 1500;
$c->redis('ZADD', 'kvs:v1:resv:e1', $exp, '10:1:000000000000dead:1');
$c->redis('PEXPIRE', 'kvs:v1:resv:e1', 10000);
my $exp0 = metric($gw[0], 'route_pool_reservations_expired_total');

my $rb = read_resp($gw[0], $gw[0]->request('POST', '/v1/completions',
                                           long_req('blocked')));
is($rb->{status}, 503, 'the dead reservation holds the slot: 503');

sleep 1.7;
my $ra = read_resp($gw[0], $gw[0]->request('POST', '/v1/completions',
                                           long_req('after')));
is($ra->{status}, 200, 'past its expiry: the long request goes through');
is($ra->{host}, 'e1', '... to e1');
is(metric($gw[0], 'route_pool_reservations_expired_total') - $exp0, 1,
   'the take dropped it, counted expired');

# --- 5. nothing leaks in Redis ----------------------------------------------------

is(resv_count(), 0, 'no reservation left');
my @keys = $c->redis('--scan', '--pattern', 'kvs:v1:*');
my @ttl = $c->redis_many(map { [ 'PTTL', $_ ] } @keys);
my @forever = map { $keys[$_] } grep { $ttl[$_] < 0 } 0 .. $#keys;
is_deeply([ grep { $_ ne 'kvs:v1:hosts' } @forever ], [],
          'every key but the hosts set has a TTL (' . scalar(@keys)
          . ' keys)');

# --- 6. nginx -t ------------------------------------------------------------------

my ($failed, $out) = $gw[0]->nginx_t(<<"EOC");
    upstream u { server 127.0.0.1:1; }
    server { location / { kvserve_route reserve_ttl=50ms; proxy_pass http://u; } }
EOC
ok($failed && $out =~ /reserve_ttl=50ms/, 'nginx -t names a bad reserve_ttl')
    or diag($out);

done_testing();
