# Token limits and the keys they are charged under (issue 18, hole 3;
# docs/limits.md "Keys: who pays") on one nginx of our own,
# worker_processes 2, with the tiny default model.
#
# Every request costs a known 20 tokens: a 4-token prompt of ids and 16
# tokens of output, the end tokens banned so that all 16 are generated
# and nothing is refunded (t/013-limit.t's way).  Every bucket has a
# burst of 100 and drains at 1 token a minute, so exactly 5 requests fit
# in one and the remaining tokens in the headers are exact.
#
# Checked: keyless requests (no Authorization header) under the default
# empty=shared are charged to one bucket together (the 6th is 429, in
# both workers at once too: 20 simultaneous, exactly 5 pass), their
# unused output comes back to that bucket, kv_rate charges it; empty=
# reject answers 401 with OpenAI's JSON error and gives back what an
# earlier zone charged; empty=unlimited admits them all; the map recipe
# of docs/limits.md, read from that file, charges "Bearer abc",
# "bearer abc", "Bearer  abc " to one bucket and an X_Api_Key header
# (dropped by nginx) to the client's address; the keyless bucket's
# tenant in the fair share is one; nginx -t warns about a bare
# $http_*/$cookie_*/$arg_* key and not about the map's variable, and
# refuses a bad empty= value naming it.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use IO::Select ();
use JSON::PP ();
use Time::HiRes qw(time);

my $t = Kvserve::Live->new('023-limit-keys');
my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

# the recipe as docs/limits.md has it, from its first map to the line
# before its kvserve_limit_zone
my $recipe = do {
    open my $fh, '<', "$FindBin::Bin/../docs/limits.md" or die "docs: $!";
    local $/;
    my $doc = <$fh>;
    $doc =~ /^(    map \$http_authorization \$kvs_bearer \{\n.*?)^    kvserve_limit_zone \$kvs_limit_key /ms
        or die 'docs/limits.md has no map recipe';
    $1;
};

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_prefix_cache off;

$recipe
    kvserve_limit_zone \$http_authorization zone=shared:1m rate=1t/m;
    kvserve_limit_zone \$http_authorization zone=refund:1m rate=1t/m;
    kvserve_limit_zone \$http_authorization zone=conc:1m rate=1t/m;
    kvserve_limit_zone \$http_authorization zone=kv:1m rate=1000t/s kv_rate=2k/s;
    kvserve_limit_zone \$http_authorization zone=rej:1m rate=1t/m;
    kvserve_limit_zone \$http_authorization zone=unl:1m rate=1t/m;
    kvserve_limit_zone "all" zone=first:1m rate=1t/m;
    kvserve_limit_zone \$kvs_limit_key zone=keys:1m rate=1t/m;
EOC
    server => <<"EOS");
        location /shared/v1/ { kvserve; kvserve_limit zone=shared burst=100 nodelay; }
        location /refund/v1/ { kvserve; kvserve_limit zone=refund burst=100 nodelay; }
        location /conc/v1/ { kvserve; kvserve_limit zone=conc burst=100 nodelay; }
        location /kv/v1/ { kvserve; kvserve_limit zone=kv burst=10000 nodelay; }
        location /reject/v1/ {
            kvserve;
            kvserve_limit zone=first burst=100 nodelay;
            kvserve_limit zone=rej burst=100 nodelay empty=reject;
        }
        location /unlimited/v1/ {
            kvserve;
            kvserve_limit zone=unl burst=100 nodelay empty=unlimited;
        }
        location /keys/v1/ { kvserve; kvserve_limit zone=keys burst=100 nodelay; }
        location /free/v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS

my $ban = '"logit_bias": {"507": -100, "508": -100, "511": -100}';

sub body {
    my ($max, $extra) = @_;
    return '{"model": "kvserve-tiny", "prompt": [1, 2, 3, 4], '
        . qq("max_tokens": $max, ) . ($extra // $ban) . '}';
}

# The request of POST $path with @headers ("Name: value" lines, sent as
# written) and $body.
sub raw {
    my ($path, $body, @headers) = @_;
    return "POST $path HTTP/1.1\r\nHost: localhost\r\n"
        . join('', map { "$_\r\n" } @headers)
        . "Content-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
}

# (status, {lowercased header => value}, body) of a response.
sub parse {
    my ($r) = @_;
    my ($head, $b) = $t->split_response($r);
    my ($status) = ($head // '') =~ m{^HTTP/1\.1 (\d+)};
    my %h;
    for (split /\r\n/, $head // '') {
        $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }
    return ($status // 0, \%h, $b // '');
}

sub post {
    my ($path, $body, @headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s raw($path, $body, @headers);
    return parse($t->read_all($s, 30));
}

sub metrics {
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my (undef, $b) = $t->split_response($r);
    return $b // '';
}

sub metric {
    my ($name, $zone) = @_;
    return metrics() =~ /^\Q$name\E\{zone="\Q$zone\E"\} (\d+)$/m
        ? $1 : undef;
}

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

# keyless requests of empty=shared zones that reached the engine: one
# tenant, 4 prompt tokens each
my $keyless = 0;

# ---- empty=shared, the default -------------------------------------------------

for my $i (1 .. 5) {
    my ($st, $h) = post('/shared/v1/completions', body(16));
    is($st, 200, "keyless request $i passes");
    $keyless++ if $st == 200;
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - 20 * $i,
       "keyless $i: the shared bucket has " . (100 - 20 * $i) . ' left');
}

{
    my ($st, $h, $b) = post('/shared/v1/completions', body(16));
    is($st, 429, 'keyless request 6: 429, the shared bucket is full');
    like($b, qr/"code":"rate_limit_exceeded"/, 'keyless 6: the 429 body');

    # an empty Authorization header is no key either
    ($st) = post('/shared/v1/completions', body(16), 'Authorization:');
    is($st, 429, 'an empty Authorization header: the same bucket');

    # a key has a bucket of its own
    ($st, $h) = post('/shared/v1/completions', body(16),
                     'Authorization: Bearer sk-one');
    is($st, 200, 'a keyed request passes beside the full keyless bucket');
    is($h->{'x-ratelimit-remaining-tokens'}, 80, 'keyed: its own bucket');
}

{
    my $said = 0;
    ok($t->wait_for(sub {
        open my $fh, '<', $t->log_path or return 0;
        $said = grep { /\[warn\].*kvserve_limit_zone "shared": requests without a key \("\$http_authorization" empty\) share one bucket/ } <$fh>;
        return $said >= 1;
    }, 5), 'the shared bucket is logged at warn');
    cmp_ok($said, '<=', 2, "once per worker ($said lines for 2 workers)");
}

# the unused output of a keyless request comes back to the shared bucket
{
    # 4 + 50 charged; EOS forced first: nothing generated, 50 back
    my ($st, $h, $b) = post('/refund/v1/completions',
                            body(50, '"logit_bias": {"508": 100}'));
    is($st, 200, 'keyless early stop: passes');
    $keyless++ if $st == 200;
    is($h->{'x-ratelimit-remaining-tokens'}, 46,
       'keyless early stop: 54 charged to the shared bucket');
    my ($gen) = $b =~ /"completion_tokens":(\d+)/;
    cmp_ok($gen // 50, '<', 50, 'it generated ' . ($gen // '?') . ' of 50');
    ($st, $h) = post('/refund/v1/completions', body(16));
    $keyless++ if $st == 200;
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - (4 + ($gen // 50)) - 20,
       'the unused output came back to the shared bucket');
    is(metric('kvserve:limit_tokens_charged_total', 'refund')
       - metric('kvserve:limit_tokens_refunded_total', 'refund'),
       4 + ($gen // 50) + 20, 'refund: charged less refunded is what ran');
    is(metric('kvserve:limit_keys', 'refund'), 1,
       'refund: one bucket for the keyless requests');
}

# kv_rate charges the shared key's KV bucket too
{
    my ($st) = post('/kv/v1/completions', body(16));
    is($st, 200, 'keyless under kv_rate: passes');
    $keyless++ if $st == 200;
    cmp_ok(metric('kvserve:limit_kv_charged_kib_seconds_total', 'kv') // 0,
           '>', 0, 'keyless under kv_rate: its KV bucket was charged');
}

# 20 keyless requests at once over both workers: exactly 5 pass
{
    my $body = body(16);
    my @s;
    for (1 .. 20) {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
            or die "connect: $!";
        my $req = raw('/conc/v1/completions', $body);
        syswrite($s, substr($req, 0, -1)) == length($req) - 1
            or die "write: $!";
        push @s, [$s, substr($req, -1)];
    }
    syswrite($_->[0], $_->[1]) for @s;
    my %got;
    my $sel = IO::Select->new(map { $_->[0] } @s);
    my $end = time + 60;
    while ($sel->count && time < $end) {
        for my $h ($sel->can_read(1)) {
            my $n = sysread($h, my $buf, 65536);
            if ($n) {
                $got{fileno $h} .= $buf;
            } else {
                $sel->remove($h);
            }
        }
    }
    my %st;
    for (@s) {
        my ($code) = ($got{fileno $_->[0]} // '') =~ m{^HTTP/1\.1 (\d+)};
        $st{$code // 0}++;
        close $_->[0];
    }
    $keyless += $st{200} // 0;
    is($st{200} // 0, 5, '20 keyless at once: exactly 5 pass');
    is($st{429} // 0, 15, '... and 15 get 429');
}

# ---- empty=reject ----------------------------------------------------------

{
    my ($st, $h, $b) = post('/reject/v1/completions', body(16));
    is($st, 401, 'empty=reject: a keyless request gets 401');
    like($h->{'content-type'}, qr{^application/json}, '401: JSON');
    is($h->{'www-authenticate'}, 'Bearer', '401: WWW-Authenticate Bearer');
    my $j = eval { JSON::PP::decode_json($b) } // {};
    is($j->{error}{type}, 'invalid_request_error',
       '401 body: type invalid_request_error');
    ok(exists $j->{error}{code} && !defined $j->{error}{code},
       '401 body: code null');
    ok(exists $j->{error}{param} && !defined $j->{error}{param},
       '401 body: param null');
    like($j->{error}{message} // '',
         qr/no value for "\$http_authorization", the key of rate limit zone "rej"/,
         '401 body: names the missing key and the zone');

    # zone "first" charged it before "rej" refused it, and gave it back
    ($st, $h) = post('/reject/v1/completions', body(16),
                     'Authorization: Bearer sk-two');
    is($st, 200, 'empty=reject: a keyed request passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 80,
       'the 401 left nothing charged in the zone before it');
    is(metric('kvserve:limit_tokens_charged_total', 'first')
       - metric('kvserve:limit_tokens_refunded_total', 'first'), 20,
       'zone "first" holds only the keyed request');
}

# ---- empty=unlimited --------------------------------------------------------

{
    my $ok = 0;
    for (1 .. 7) {
        my ($st, $h) = post('/unlimited/v1/completions', body(16));
        $ok++ if $st == 200 && !exists $h->{'x-ratelimit-limit-tokens'};
    }
    is($ok, 7, 'empty=unlimited: 7 keyless requests of 20 tokens pass, '
               . 'unaccounted');
}

# ---- the map recipe -----------------------------------------------------------

{
    my @spellings = ('Authorization: Bearer abc', 'authorization: bearer abc',
                     'Authorization: Bearer  abc ', 'AUTHORIZATION: BEARER abc',
                     "Authorization: \tbearer\tabc");
    for my $i (0 .. $#spellings) {
        my ($st, $h) = post('/keys/v1/completions', body(16),
                            $spellings[$i]);
        is($st, 200, "recipe: \"$spellings[$i]\" passes");
        is($h->{'x-ratelimit-remaining-tokens'}, 80 - 20 * $i,
           "... charged to the one bucket of abc (" . (80 - 20 * $i)
           . ' left)');
    }
    my ($st) = post('/keys/v1/completions', body(16),
                    'Authorization: bearer   abc');
    is($st, 429, 'recipe: a sixth spelling finds the bucket full');

    # the token itself keeps its case: another key, another bucket
    my $h;
    ($st, $h) = post('/keys/v1/completions', body(16),
                     'Authorization: Bearer ABC');
    is($st, 200, 'recipe: token ABC is another key');
    is($h->{'x-ratelimit-remaining-tokens'}, 80, '... with its own bucket');

    # X_Api_Key is dropped by nginx: each value falls back to the
    # address, with a request that has no key at all
    for my $i (1 .. 3) {
        ($st, $h) = post('/keys/v1/completions', body(16),
                         "X_Api_Key: sk-under-$i");
        is($st, 200, "recipe: X_Api_Key sk-under-$i passes");
        is($h->{'x-ratelimit-remaining-tokens'}, 100 - 20 * $i,
           "... charged to the address's bucket (" . (100 - 20 * $i)
           . ' left)');
    }
    ($st, $h) = post('/keys/v1/completions', body(16));
    is($h->{'x-ratelimit-remaining-tokens'}, 20,
       'recipe: no header at all: the same address bucket');
    ($st, $h) = post('/keys/v1/completions', body(16),
                     'Authorization: Basic dXNlcjpwYXNz');
    is($h->{'x-ratelimit-remaining-tokens'}, 0,
       'recipe: a non-bearer Authorization: the same address bucket');
    ($st) = post('/keys/v1/completions', body(16), 'X_Api_Key: sk-under-9');
    is($st, 429, 'recipe: a fresh X_Api_Key value gets no fresh budget');
    is(metric('kvserve:limit_keys', 'keys'), 3,
       'recipe: three buckets: abc, ABC and the address');
}

# ---- the tenant of keyless requests ------------------------------------------

# The fair share's tenants: keyless requests under empty=shared, of
# every such zone, are one tenant, the XXH3-128 of the empty key:
# 99aa06d3014798d86001c324468d497f in libxxhash's canonical form (high
# 64 bits then low, big endian), computed with a throwaway program
# against libxxhash outside the module, as t/016-fair.t's.
{
    my ($st) = post('/kv/v1/completions', body(16));
    is($st, 200, 'another keyless request');
    $keyless++ if $st == 200;
    my ($m, $got) = ('', 0);
    ok($t->wait_for(sub {
        $m = metrics();
        ($got) = $m =~ /^kvserve:tenant_prefill_tokens_total\{model_name="kvserve-tiny",tenant="99aa06d30147"\} (\d+)$/m;
        return ($got // 0) == 4 * $keyless;
    }, 10), "the $keyless keyless requests that ran are one tenant with "
            . 4 * $keyless . ' prompt tokens (' . ($got // 'none') . ')')
        or diag join "\n", grep { /tenant_prefill/ } split /\n/, $m;
}

# ---- nginx -t ----------------------------------------------------------------

for my $key ('$http_authorization', '$http_x_api_key', '${http_x_api_key}',
             '$cookie_session', '$arg_key') {
    my ($failed, $out) = $t->nginx_t(
        "    kvserve_limit_zone $key zone=w:1m rate=10t/s;\n");
    ok(!$failed, "nginx -t passes a zone keyed by $key") or diag $out;
    like($out, qr/\[warn\] (?:\d+#\d+: )?kvserve_limit_zone "w" is keyed by "\Q$key\E" as the client sends it: .*Safe keys/,
         "... warning about $key, naming the zone and the recipe");
}

for my $key ('$kvs_limit_key', '$binary_remote_addr',
             '"$http_authorization:$binary_remote_addr"', '"all"') {
    my ($failed, $out) = $t->nginx_t($recipe
        . "    kvserve_limit_zone $key zone=w:1m rate=10t/s;\n");
    ok(!$failed, "nginx -t passes a zone keyed by $key") or diag $out;
    unlike($out, qr/is keyed by/, "... without a warning");
}

for my $c (['empty=maybe', qr/invalid empty value "empty=maybe": shared, reject or unlimited/],
           ['empty=', qr/invalid empty value "empty="/],
           ['empty=Shared', qr/invalid empty value "empty=Shared"/]) {
    my ($failed, $out) = $t->nginx_t(
        "    kvserve_limit_zone \$arg_k zone=one:1m rate=10t/s;\n"
        . "    kvserve_limit zone=one burst=5 $c->[0];\n");
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... naming the value");
}

{
    my ($failed, $out) = $t->nginx_t(
        "    kvserve_limit_zone \$arg_k zone=one:1m rate=10t/s;\n"
        . "    kvserve_limit zone=one burst=5 nodelay empty=unlimited;\n"
        . "    server { location / { kvserve_limit zone=one empty=reject; } }\n");
    ok(!$failed, 'nginx -t passes empty=unlimited and empty=reject')
        or diag $out;
}

done_testing();
