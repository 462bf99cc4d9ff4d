# A host's host-tier blocks in the prefix index, as a gateway reads them
# (issue 26 point 4, docs/prefix-index.md "Lower tiers"): a real
# redis-server on a free port, two engine hosts publishing
# (kvserve_index) and a gateway (kvserve_route).
#
# The host tier needs the CUDA backend, so no engine here can publish
# h:<id> itself (test_engine_thost_ix.c checks what an engine publishes);
# this test writes the entries an engine with a host tier would write,
# with e1's real incarnation, and checks what the gateway makes of them.
#
# - A 96-token prompt P (6 blocks) has its first 64 tokens sent to e2
#   directly: its first 4 blocks list e2 (its pool): 64 tokens.
# - P's 6 block entries get h:e1=<e1's incarnation>: at the default host
#   weight (900 per mille) e1's 6 blocks are worth 86.4 tokens, more
#   than e2's 64: P and more through the gateway go to e1, reason
#   prefix, 96 tokens believed cached.
# - The same entries as d:e1 instead (the disk tier's, 500 per mille):
#   48 tokens, less than e2's 64: the gateway sends P to e2, believing
#   64 cached tokens.
# - h:e1 of another incarnation (a restarted e1's): ignored, P to e2.
#
# Skips when redis-server is not installed.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Cluster;
use JSON::PP ();

my $c = Kvserve::Cluster->new('048');
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
plan skip_all => "no kvserve tool at $cli" unless -x $cli;

my $e1 = $c->live('e1');
my $e2 = $c->live('e2');
my $gw = $c->live('gw');

END { $c->stop if $c }

sub engine_conf {
    my ($e, $id) = @_;
    $e->write_conf(<<"EOC");
    kvserve_model kvserve-tiny $model;
    kvserve_backend cpu;
    kvserve_kv_block 16;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_cache_scope global;
    kvserve_index redis=@{[ $c->redis_addr ]} host_id=$id heartbeat=200ms
                  advertise=http://127.0.0.1:@{[ $e->port ]};
EOC
}

engine_conf($e1, 'e1');
engine_conf($e2, 'e2');

# load weight 1: this test is about what a host holds, not its load
$gw->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model kvserve-tiny $model;
    kvserve_kv_block 16;
    kvserve_cache_scope global;
    kvserve_route_load_weight 1;

    upstream engines {
        kvserve_prefix_balance;
        server 127.0.0.1:@{[ $e1->port ]};
        server 127.0.0.1:@{[ $e2->port ]};
    }
EOC
        location /v1/ {
            kvserve_route redis=@{[ $c->redis_addr ]};
            proxy_pass http://engines;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Host \$kvserve_route_host always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
        }
EOS

ok($c->redis_start, 'redis-server started on ' . $c->redis_addr);
ok($e1->start, 'e1 started');
ok($e2->start, 'e2 started');
ok($e1->engine_pid && $e2->engine_pid, 'their engines are up');
ok($gw->start, 'the gateway started');

sub record { return $c->redis('GET', "kvs:v1:host:$_[0]") // '' }

ok($gw->wait_for(sub { record('e1') =~ /^kvs1 / && record('e2') =~ /^kvs1 / },
                 20), 'e1 and e2 registered');
ok($gw->wait_for(sub { $gw->workers_listing(2) >= 2 }, 20),
   "the gateway's two workers list both hosts");
my ($inc) = record('e1') =~ / inc=([0-9a-f]{16})(?: |$)/;
my ($epoch) = record('e1') =~ / epoch=([0-9a-f]{16})(?: |$)/;
unlike(record('e1'), qr/ hw=/, 'no host weight without a host tier');

sub complete {
    my ($live, @ids) = @_;
    my $r = $live->read_all($live->request('POST', '/v1/completions',
        JSON::PP::encode_json({ model => 'kvserve-tiny',
                                prompt => [@ids], max_tokens => 1,
                                temperature => 0 })), 60);
    my ($head, $body) = $live->split_response($r);
    return ($head, eval { JSON::PP::decode_json($body) } || {});
}

my $seed = 48;
sub ids {
    my ($n) = @_;
    my @v;
    for (1 .. $n) {
        $seed = ($seed * 1103515245 + 12345) % 2147483648;
        push @v, 10 + $seed % 400;
    }
    return @v;
}

# HGETALL of a block's entry, as "field=value ..." sorted ("" for none)
sub entry {
    my @l = grep { length } $c->redis('HGETALL', "kvs:v1:blk:$_[0]");
    return '' if @l % 2;
    my %h = @l;
    return join ' ', map { "$_=$h{$_}" } sort keys %h;
}

# A new 96-token prompt whose first 64 tokens e2 computed (its pool's 4
# blocks) and whose 6 blocks list e1 under field with value, as e1's
# publisher would write them; then it and 16 more tokens through the
# gateway: the response's head.  Each case has its prompt: a prompt
# routed to e1 is in e1's pool afterwards.
sub case {
    my ($what, $field, $value) = @_;
    my @p = ids(96);
    my @names = split /\n/,
        `$cli index-names --model kvserve-tiny --epoch $epoch --block 16 @p`;
    is(scalar @names, 6, "$what: the prompt's 6 block names");

    my ($head) = complete($e2, @p[0 .. 63]);
    like($head, qr{^HTTP/1\.1 200}, "$what: its first 64 tokens on e2");
    ok($e2->wait_for(sub { 4 == grep { entry($_) =~ /(?:^| )e2=/ } @names },
                     10), "$what: its first 4 blocks list e2 (its pool)");

    $c->redis_many(map { (['HSET', "kvs:v1:blk:$_", $field, $value],
                          ['PEXPIRE', "kvs:v1:blk:$_", 600000]) } @names);
    is(scalar(grep { entry($_) =~ /(?:^| )\Q$field\E=\Q$value\E(?: |$)/ }
                   @names), 6, "$what: its 6 blocks list $field");

    ($head) = complete($gw, @p, ids(16));
    like($head, qr{^HTTP/1\.1 200}, "$what: through the gateway");
    return $head;
}

my $head = case('host tier', 'h:e1', $inc);
like($head, qr/^X-Route-Host: e1\r?$/m,
     '... routed to e1: 6 host-tier blocks outweigh 4 pool blocks');
like($head, qr/^X-Route-Reason: prefix\r?$/m, '... by prefix');
like($head, qr/^X-Route-Cached: 96\r?$/m, '... believing 96 cached tokens');

$head = case('disk tier', 'd:e1', $inc);
like($head, qr/^X-Route-Host: e2\r?$/m,
     '... routed to e2: 6 disk blocks weigh less than 4 pool blocks');
like($head, qr/^X-Route-Cached: 64\r?$/m, '... believing 64 cached tokens');

$head = case('another incarnation', 'h:e1', 'ffffffffffffffff');
like($head, qr/^X-Route-Host: e2\r?$/m, '... ignored: routed to e2');

is($e1->log_count(qr/\[(?:alert|crit|emerg)\]/), 0, 'no alert on e1');
is($gw->log_count(qr/\[(?:alert|crit|emerg)\]/), 0, 'no alert on the gateway');

done_testing();
