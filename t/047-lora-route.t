# LoRA adapters across hosts (issue 25 point 4, docs/lora.md "Across
# hosts"): a real redis-server on a free port, three engine hosts
# publishing their blocks (kvserve_index) and a gateway (kvserve_route),
# all with the same generated base:
#
#   - h1 and h2 serve adapter A from the same file (a.gguf), h3 serves
#     another file under the same name A (a3.gguf); the gateway declares
#     A with a.gguf.  Each has its own copy (the names follow the bytes,
#     not the path).  Every host answers with its id in X-Host.
#   - The names of a prompt's blocks under A are computed here from the
#     base's epoch (the hosts' records) and the adapter file's (`kvserve
#     info`), FNV-1a 64 as docs/prefix-index.md says, by `kvserve
#     index-names`: A's, A3's and the base's names all differ, and the
#     Redis entries list exactly the hosts that hold the prompt under
#     each (h3's A blocks only under A3's names).
#   - A 96-token prompt P under base:A and under the base goes to h3,
#     its first 32 tokens under base:A to h1.  Through the gateway, P's
#     first 48 tokens under base:A go to h1 (prefix, 32 cached tokens),
#     not to h3, which holds all of P under its own A: were the names
#     the same, the gateway would pick h3 for 48.
#   - The same prompt under the base through the gateway goes to h3 (the
#     only host holding it under the base), not by A's blocks.
#   - Once h2 holds all of P under A, P under base:A goes to h2 (96
#     cached tokens), h1 holding 48 of it.
#   - kvserve_lora_map from the tenant (gateway and hosts alike): acme
#     is mapped to A, so its request for the base is routed by A's
#     blocks (h2, 96 cached); beta is mapped to the base, so its request
#     for base:A gets 404 naming the model id, routed by no prefix, and
#     no block entry is added to Redis.
#   - Each host's record lists its adapter files ("lora=", a filter of
#     their epochs): h1's and h2's the same, h3's another.
#   - A replaced file: h3's and the gateway's copies of A replaced by a
#     third file and both reloaded.  P's first 48 tokens on h3 reuse
#     nothing; their names under the new file list h3 alone; P through
#     the gateway goes to h3 (48 cached), not to h2 and its 96 of the old
#     file.  A prompt no host holds goes to h3 by load, the only host
#     whose record lists the gateway's file (h1 would win the tie of
#     equal loads by its id); one under the base goes to h1.
#
# The hosts and the gateway share the global cache scope (index-names
# names blocks under the empty scope).  Skips when redis-server is not
# installed.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Cluster;
use JSON::PP ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep);
use File::Copy qw(copy);

my $c = Kvserve::Cluster->new('047');
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
plan skip_all => "no kvserve tool at $cli" unless -x $cli;

my %h = map { ($_ => $c->live($_)) } qw(h1 h2 h3);
my $gw = $c->live('gw');
my $dir = $gw->root . '/models';
mkdir $dir or die "$dir: $!";

END { $c->stop if $c }

sub cli {
    my ($what, $args) = @_;
    my $out = `'$cli' $args 2>&1`;
    is($?, 0, $what) or diag($out);
    return $out;
}

cli('a base', "gen-model --dim 64 --ffn 128 --heads 4 --kv-heads 2"
    . " --layers 2 --vocab 512 --seed 25 --name lbase $dir/base.gguf");
cli('adapter A', "gen-lora $dir/base.gguf --rank 8 --seed 1 $dir/a.gguf");
cli('another file for h3\'s A',
    "gen-lora $dir/base.gguf --rank 8 --seed 2 $dir/a3.gguf");
cli('a third for the replacement',
    "gen-lora $dir/base.gguf --rank 8 --seed 3 $dir/anew.gguf");

# each its own copy: the names follow the bytes, not the path
for my $id (qw(h1 h2 h3 gw)) {
    copy("$dir/" . ($id eq 'h3' ? 'a3' : 'a') . '.gguf', "$dir/$id-a.gguf")
        or die "copy: $!";
}

# an adapter file's epoch (xxh3-64 of its bytes), as `kvserve info` says
sub file_epoch {
    my $out = `'$cli' info --json $_[0]`;
    my $j = eval { JSON::PP::decode_json($out) } || {};
    return $j->{epoch} // '';
}

my $fa = file_epoch("$dir/a.gguf");
my $fa3 = file_epoch("$dir/a3.gguf");
my $fnew = file_epoch("$dir/anew.gguf");
like($fa, qr/^[0-9a-f]{16}$/, "a.gguf's epoch $fa");
like($fa3, qr/^[0-9a-f]{16}$/, "a3.gguf's epoch $fa3");
ok($fa ne $fa3 && $fa ne $fnew && $fa3 ne $fnew,
   "... others for a3.gguf and anew.gguf ($fnew)");

my $map = <<'EOM';
    map $http_x_tenant $lora {
        acme    A;
        beta    "";
        default "";
    }
EOM

for my $id (qw(h1 h2 h3)) {
    my $e = $h{$id};
    $e->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model base $dir/base.gguf;
    kvserve_lora A $dir/$id-a.gguf;
    kvserve_backend cpu;
    kvserve_kv_block 16;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_cache_scope global;
    kvserve_index redis=@{[ $c->redis_addr ]} host_id=$id heartbeat=200ms
                  advertise=http://127.0.0.1:@{[ $e->port ]};
$map
EOC
        location /v1/ { kvserve; add_header X-Host $id always; }
        location /t/ {
            kvserve;
            kvserve_tenant \$http_x_tenant;
            kvserve_lora_map \$lora;
            add_header X-Host $id always;
        }
        location = /status { kvserve_status; }
EOS
}

# load weight 1: this test is about what a host holds, not its load
my $route = <<"EOR";
            kvserve_route redis=@{[ $c->redis_addr ]};
            proxy_pass http://engines;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Host \$kvserve_route_host always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
EOR
$gw->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model base $dir/base.gguf;
    kvserve_lora A $dir/gw-a.gguf;
    kvserve_kv_block 16;
    kvserve_cache_scope global;
    kvserve_route_load_weight 1;
$map
    upstream engines {
        kvserve_prefix_balance;
@{[ join '', map { "        server 127.0.0.1:" . $h{$_}->port . ";\n" }
            qw(h1 h2 h3) ]}
    }
EOC
        location /v1/ {
$route
        }
        location /t/ {
            kvserve_tenant \$http_x_tenant;
            kvserve_lora_map \$lora;
$route
        }
EOS

ok($c->redis_start, 'redis-server started on ' . $c->redis_addr);
for my $id (qw(h1 h2 h3)) {
    ok($h{$id}->start, "$id started");
}
ok($h{h1}->engine_pid && $h{h2}->engine_pid && $h{h3}->engine_pid,
   'their engines are up');
ok($gw->start, 'the gateway started');

sub record { return $c->redis('GET', "kvs:v1:host:$_[0]") // '' }

ok($gw->wait_for(sub { 3 == grep { record($_) =~ /^kvs1 / } qw(h1 h2 h3) },
                 20), 'h1, h2 and h3 registered');
# a worker that listed the hosts before h3 registered routed past h3
ok($gw->wait_for(sub { $gw->workers_listing(3) >= 2 }, 20),
   "the gateway's two workers list the three hosts");
my %epoch = map { ($_ => (record($_) =~ / epoch=([0-9a-f]{16})(?: |$)/)[0]
                         // '') } qw(h1 h2 h3);
my $base = $epoch{h1};
my %lr = map { ($_ => (record($_) =~ / lora=([0-9a-f]+)(?: |$)/)[0] // '') }
         qw(h1 h2 h3);
like($lr{h1}, qr/^[0-9a-f]{128}$/, "h1's record lists its adapter files");
ok($lr{h2} eq $lr{h1} && $lr{h3} ne $lr{h1},
   "... h2's the same (the same file), h3's others");
like($base, qr/^[0-9a-f]{16}$/, "the base's epoch $base");
ok($epoch{h2} eq $base && $epoch{h3} eq $base, '... on every host');

# kvs_index_lora_epoch: FNV-1a 64 of the two epochs as u64le, not the
# base's own
sub lora_epoch {
    my ($b, $f) = @_;
    my $bytes = join '', map { scalar reverse pack 'H16', $_ } $b, $f;
    my $e = Kvserve::Live::fnv1a64($bytes);
    if ($e eq $b) {
        substr($e, 15, 1) = sprintf '%x', hex(substr $e, 15, 1) ^ 1;
    }
    return $e;
}

# token ids 10..409, the same every run (perl's own drand48)
srand 47;
sub ids { return map { 10 + int rand 400 } 1 .. $_[0] }

my @p = ids(96);

sub names {
    my ($epoch, $adapter) = @_;
    my $a = defined $adapter ? "--adapter $adapter" : '';
    return split /\n/,
        `'$cli' index-names --model base --epoch $epoch $a --block 16 @p`;
}

my @na = names(lora_epoch($base, $fa), $fa);
my @na3 = names(lora_epoch($base, $fa3), $fa3);
my @nb = names($base);
is(scalar @na, 6, "P's 6 block names under A");
my %seen;
$seen{$_}++ for @na, @na3, @nb;
is(scalar keys %seen, 18, '... all differ from A3\'s and the base\'s');

# the hosts listed by a block's entry, as "h1 h3"
sub holders {
    my %f = map { ($_ => 1) } $c->redis('HKEYS', "kvs:v1:blk:$_[0]");
    return join ' ', grep { $f{$_} } qw(h1 h2 h3);
}

# a completion of token ids, sent to $live (a host or the gateway) at
# $uri: (head, decoded body)
sub complete {
    my ($live, $model, $ids, %o) = @_;
    my $body = JSON::PP::encode_json({ model => $model, prompt => $ids,
                                       max_tokens => 1, temperature => 0 });
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $live->port, Proto => 'tcp',
                                  Timeout => 10) or die "connect: $!";
    print $s "POST " . ($o{uri} // '/v1/completions') . " HTTP/1.1\r\n"
        . "Host: localhost\r\n"
        . (defined $o{tenant} ? "X-Tenant: $o{tenant}\r\n" : '')
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    my ($head, $raw) = $live->split_response($live->read_all($s, 60));
    return ($head, eval { JSON::PP::decode_json($raw) } || { raw => $raw });
}

sub header { return ($_[0] =~ /^\Q$_[1]\E: ([^\r\n]*)\r?$/m)[0] // '' }
sub cached { return $_[0]{usage}{prompt_tokens_details}{cached_tokens} }

# ---- what the hosts publish -----------------------------------------------

my ($head, $body) = complete($h{h3}, 'base:A', [@p]);
like($head, qr{^HTTP/1\.1 200}, 'P under base:A on h3 (its own A)');
($head) = complete($h{h3}, 'base', [@p]);
like($head, qr{^HTTP/1\.1 200}, 'P under the base on h3');
($head) = complete($h{h1}, 'base:A', [@p[0 .. 31]]);
like($head, qr{^HTTP/1\.1 200}, "P's first 32 tokens under base:A on h1");

my @got;
ok($gw->wait_for(sub {
       @got = map { holders($_) } @na3, @nb, @na[0, 1];
       12 == grep({ $_ eq 'h3' } @got[0 .. 11]) && "@got[12, 13]" eq 'h1 h1';
   }, 10), "Redis: A3's and the base's names list h3, A's first two h1")
    or diag("@got");
is(join(',', map { holders($_) } @na[2 .. 5]), ',,,',
   "... A's other four list no host: h3's A blocks are not under them");

# ---- the gateway ----------------------------------------------------------

($head, $body) = complete($gw, 'base:A', [@p[0 .. 47]]);
like($head, qr{^HTTP/1\.1 200}, "P's first 48 under base:A via the gateway");
is(header($head, 'X-Host'), 'h1', '... answered by h1')
    or diag($head);
is(header($head, 'X-Route-Reason'), 'prefix', '... routed by prefix');
is(header($head, 'X-Route-Cached'), 32, '... believing 32 cached tokens');
is(cached($body), 32, '... h1 reused 32 tokens');

($head, $body) = complete($gw, 'base', [@p, ids(16)]);
like($head, qr{^HTTP/1\.1 200}, 'P and more under the base via the gateway');
is(header($head, 'X-Host'), 'h3', '... answered by h3, not by A\'s holders')
    or diag($head);
is(header($head, 'X-Route-Reason'), 'prefix', '... routed by prefix');
is(header($head, 'X-Route-Cached'), 96, '... believing 96 cached tokens');
is(cached($body), 96, '... h3 reused 96 tokens');

($head) = complete($h{h2}, 'base:A', [@p]);
like($head, qr{^HTTP/1\.1 200}, 'P under base:A on h2');
ok($gw->wait_for(sub {
       @got = map { holders($_) } @na;
       "@got[0 .. 2]" eq 'h1 h2 h1 h2 h1 h2' && "@got[3 .. 5]" eq 'h2 h2 h2';
   }, 10), "Redis: A's first 3 names list h1 and h2, the other 3 h2")
    or diag(join ',', @got);
is(join(',', map { holders($_) } @na3), join(',', ('h3') x 6),
   "... A3's still h3 alone");

($head, $body) = complete($gw, 'base:A', [@p, ids(16)]);
is(header($head, 'X-Host'), 'h2', 'P and more under base:A via the '
   . 'gateway: h2') or diag($head);
is(header($head, 'X-Route-Reason'), 'prefix', '... routed by prefix');
is(header($head, 'X-Route-Cached'), 96, '... believing 96 cached tokens');
is(cached($body), 96, '... h2 reused 96 tokens');

# ---- the tenant's map -----------------------------------------------------

($head, $body) = complete($gw, 'base', [@p, ids(16)], uri => '/t/v1/completions',
                          tenant => 'acme');
like($head, qr{^HTTP/1\.1 200}, 'acme (mapped to A) asks for the base');
is(header($head, 'X-Host'), 'h2', '... routed by A\'s blocks to h2')
    or diag($head);
is(header($head, 'X-Route-Cached'), 96, '... believing 96 cached tokens');
is(cached($body), 96, '... h2 reused 96 tokens');

my @keys = sort $c->redis('KEYS', 'kvs:v1:blk:*');
($head, $body) = complete($gw, 'base:A', [@p, ids(16)],
                          uri => '/t/v1/completions', tenant => 'beta');
like($head, qr{^HTTP/1\.1 404}, 'beta (mapped to the base) asks for base:A:'
     . ' 404') or diag($head);
like($body->{error}{message} // '', qr/`base:A` does not exist/,
     '... naming the model id');
isnt(header($head, 'X-Route-Reason'), 'prefix', '... not routed by prefix');
sleep 0.5;
is_deeply([sort $c->redis('KEYS', 'kvs:v1:blk:*')], \@keys,
          '... and no block entry added');

# ---- a replaced file --------------------------------------------------------

# the pids of $live's worker processes
sub workers {
    my ($live) = @_;
    my $m = $live->master_pid or return ();
    return map { /^\s*(\d+)\s+nginx: worker/ ? $1 : () }
           `ps -o pid=,args= --ppid $m`;
}

# the adapter set of $id's record ("lora=")
sub loras { return (record($_[0]) =~ / lora=([0-9a-f]+)(?: |$)/)[0] // '' }

# h3's and then the gateway's copies of A replaced by anew.gguf's bytes,
# each reloaded (every old worker gone); h1 and h2 keep the old file, so
# the gateway's A is h3's alone now
my $lora3 = loras('h3');
for my $id (qw(h3 gw)) {
    my $l = $id eq 'gw' ? $gw : $h{$id};
    my @old = workers($l);
    copy("$dir/anew.gguf", "$dir/$id-a.gguf.new") or die "copy: $!";
    rename "$dir/$id-a.gguf.new", "$dir/$id-a.gguf" or die "rename: $!";
    kill 'HUP', $l->master_pid;
    ok(@old && $l->wait_for(sub {
           my @now = workers($l);
           @now && !grep { my $o = $_; grep { $_ == $o } @now } @old;
       }, 20), "$id reloaded with the new file under A");
    next if $id eq 'gw';
    ok($l->wait_for(sub { my $x = loras('h3');
                          $x ne $lora3 && $x ne '' && $x ne loras('h1') },
                    10), "h3's record says its new file");
}
sleep 1.2;                    # the gateway's workers list the hosts

my @nn = names(lora_epoch($base, $fnew), $fnew);
($head, $body) = complete($h{h3}, 'base:A', [@p[0 .. 47]]);
like($head, qr{^HTTP/1\.1 200}, "P's first 48 under the new A on h3");
is(cached($body), 0, '... none of the old file\'s blocks reused');
ok($gw->wait_for(sub {
       @got = map { holders($_) } @nn[0 .. 5];
       "@got" eq 'h3 h3 h3   ';
   }, 10), "Redis: the new file's first 3 names list h3, no other host")
    or diag(join ',', @got);

($head, $body) = complete($gw, 'base:A', [@p, ids(16)]);
is(header($head, 'X-Host'), 'h3', 'P and more under the new A via the '
   . 'gateway: h3') or diag($head);
is(header($head, 'X-Route-Reason'), 'prefix', '... routed by prefix');
is(header($head, 'X-Route-Cached'), 48, '... believing 48 cached tokens, '
   . 'not the old file\'s 96 on h2');
is(cached($body), 48, '... h3 reused 48 tokens');

is(join(',', map { holders($_) } @na3), join(',', ('h3') x 6),
   "h3's blocks under its old file's names are still listed (kept "
   . 'until evicted)');

# a prompt no host holds: by load, among the hosts whose record lists
# the gateway's file, so h3 (h1 would win the tie of equal loads by its
# id, and serve the old file)
for my $k (1 .. 2) {
    ($head, $body) = complete($gw, 'base:A', [ids(48)]);
    is(header($head, 'X-Host'), 'h3', "a new prompt $k under base:A: h3, "
       . 'the only host of the new file') or diag($head);
    is(header($head, 'X-Route-Reason'), 'least_loaded', '... by load');
}
($head) = complete($gw, 'base', [ids(48)]);
is(header($head, 'X-Host'), 'h1', 'a new prompt under the base: h1 (the '
   . 'tie of equal loads), every host serves the base') or diag($head);

for my $l ($gw, values %h) {
    is($l->log_count(qr/\[(?:alert|crit|emerg)\]/), 0,
       'no alert in ' . $l->root);
}

done_testing();
