# One small request must not take the engine from the others when no
# limit is configured (issue 18, hole 2; docs/limits.md "Requests that
# ask for much"): with no kvserve_limit zone at all,
#   - a request's sequences (prompts x n) are capped by
#     kvserve_max_sequences (16 by default): the measured amplification,
#     128 prompts x n=128 x max_tokens 2000 in 702 bytes, is a 400 naming
#     n and the numbers, and so are 17 prompts (naming prompt) and n=17;
#   - the fair share's tenant is the client address, so a keyless hog
#     from 127.0.0.1 that fills the KV cache (several requests of 16
#     prompts, each generating to the end of the context) does not keep
#     out a second client on 127.0.0.2: the hog holds over its share
#     (kvserve_fair_kv_max, 0.5) while the other waits, so its newest
#     sequences are preempted and the other's 20 short requests all
#     answer 200 within SHORT_BOUND seconds each while the hog still
#     runs;
#   - afterwards every KV block a sequence held is back: the engine's
#     kv_used (blocks sequences hold; the prefix cache's are apart) is 0.
# The KV cache is made small (kvserve_kv_cache 1m: 2048 tokens of the
# tiny model) so that the hog fills it on this machine; nothing else is
# tuned.  The end tokens are banned (logit_bias) so every choice
# generates all its max_tokens.  Then `nginx -t` refuses bad
# kvserve_max_sequences and kvserve_request_kv_max values, naming them.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use IO::Select ();
use JSON::PP ();
use Time::HiRes qw(time sleep);

use constant SHORT_BOUND => 3;      # seconds, each short request
use constant HOGS        => 16;     # the hog's concurrent requests
use constant HOG_MAX     => 400;    # tokens each of its choices makes

my $t = Kvserve::Live->new('022-amplify');
my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

# 127.0.0.2 is loopback on Linux without configuration; nginx listens
# there too, so that the second client is another address
$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 1m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
EOC
    server => <<"EOS");
        listen 127.0.0.2:$port;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
EOS

my $ban = '"logit_bias": {"507": -100, "508": -100, "511": -100}';

# Sends a POST of $body to /v1/completions from $from; the socket.
sub post {
    my ($from, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "$from:$port",
                                  LocalAddr => $from, Proto => 'tcp',
                                  Timeout => 10)
        or die "connect from $from: $!";
    print $s "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
    return $s;
}

# (status, decoded body or undef) of the response on $s.
sub answer {
    my ($s, $secs) = @_;
    my ($head, $b) = $t->split_response($t->read_all($s, $secs));
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    return ($status // 0, eval { JSON::PP::decode_json($b) });
}

sub status {
    my ($st, $j) = answer($t->request('GET', '/status'), 10);
    return $j ? $j->{models}[0] : {};
}

# A completions body: $n_prompts prompts of 4 ids each (distinct, so the
# prefix cache shares nothing), n, max_tokens.
sub body {
    my ($n_prompts, $n, $max, $base) = @_;
    my @p = map { my $b = ($base + 4 * $_) % 500 + 1;
                  '[' . join(',', $b, $b + 1, $b + 2, 3) . ']' }
            0 .. $n_prompts - 1;
    return '{"model": "kvserve-tiny", "prompt": [' . join(',', @p)
        . "], \"n\": $n, \"max_tokens\": $max, $ban}";
}

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

# ---- the sequences' cap -----------------------------------------------------

{
    my $big = body(128, 128, 2000, 0);
    my ($st, $j) = answer(post('127.0.0.1', $big), 30);
    is($st, 400, '128 prompts x n=128 x 2000: a 400');
    is($j && $j->{error}{param}, 'n', '... naming n');
    like($j && $j->{error}{message}, qr/at most 16 sequences .* asks for 16384 \(128 prompts x n=128\)/,
         '... and the numbers');
    is($j && $j->{error}{type}, 'invalid_request_error', '... its type');
    is($j && $j->{error}{code}, 'integer_above_max_value', '... its code');

    ($st, $j) = answer(post('127.0.0.1', body(17, 1, 8, 0)), 30);
    is($st, 400, '17 prompts x n=1: a 400');
    is($j && $j->{error}{param}, 'prompt', '... naming prompt');
    like($j && $j->{error}{message}, qr/asks for 17 \(17 prompts x n=1\)/,
         '... and the numbers');

    ($st, $j) = answer(post('127.0.0.1', body(1, 17, 8, 0)), 30);
    is($st, 400, '1 prompt x n=17: a 400 naming n');
    is($j && $j->{error}{param}, 'n', '... naming n');
}

# ---- a hog from 127.0.0.1, short requests from 127.0.0.2 --------------------

my $blocks = status()->{kv_blocks};
ok($blocks, "the KV cache has $blocks blocks") or diag explain status();

my $t0 = time;
my @hogs = map { post('127.0.0.1', body(16, 1, HOG_MAX, 64 * $_)) }
           1 .. HOGS;

# the hog fills the cache before the other client comes
my $full = $t->wait_for(sub {
    my $m = status();
    return ($m->{kv_used} // 0) >= $blocks - 2 && ($m->{waiting} // 0) > 0;
}, 20);
ok($full, 'the hog holds the whole cache and has sequences waiting')
    or diag explain status();

my $t1 = time;
my @short = map { [post('127.0.0.2', body(1, 1, 20, 7 * $_)), time] }
            1 .. 20;
my ($ok, $slowest) = (0, 0);
for my $i (0 .. $#short) {
    my ($s, $sent) = @{$short[$i]};
    my ($st, $j) = answer($s, 60);
    my $took = time - $sent;
    $slowest = $took if $took > $slowest;
    $ok++ if $st == 200 && $j
             && $j->{choices}[0]{finish_reason} eq 'length'
             && $j->{usage}{completion_tokens} == 20
             && $took <= SHORT_BOUND;
    diag "short $i: status $st in ${took}s" unless $st == 200
                                                   && $took <= SHORT_BOUND;
}
is($ok, 20, '20 short requests from 127.0.0.2: each a 200 within '
            . SHORT_BOUND . ' s');
diag sprintf('shorts: slowest %.2f s; all done %.2f s after they were '
             . 'sent, %.2f s after the hog', $slowest, time - $t1,
             time - $t0);
my $during = status();
diag "after the shorts: running $during->{running}, waiting "
     . "$during->{waiting}, preemptions $during->{preemptions}";

my $done = 0;
for my $s (@hogs) {
    my ($st, $j) = answer($s, 120);
    $done++ if $st == 200 && $j && @{$j->{choices}} == 16
               && $j->{usage}{completion_tokens} == 16 * HOG_MAX
               && !grep { $_->{finish_reason} ne 'length' }
                  @{$j->{choices}};
}
is($done, HOGS, 'every hog request still completes, all its tokens');
diag sprintf('the hog took %.2f s', time - $t0);

my $m = {};
ok($t->wait_for(sub {
    $m = status();
    return defined $m->{running} && $m->{running} == 0
           && $m->{waiting} == 0;
}, 10), 'the engine is idle');
is($m->{kv_used}, 0, 'no sequence holds a KV block: none leaked')
    or diag explain $m;

# ---- nginx -t ----------------------------------------------------------------

sub nginx_t { return $t->nginx_t($_[0]) }

for my $c (
    ['kvserve_max_sequences 0;', qr/invalid value "0" in "kvserve_max_sequences" directive, it must be a number of sequences from 1 to 16384/],
    ['kvserve_max_sequences 16385;', qr/invalid value "16385"/],
    ['kvserve_max_sequences many;', qr/invalid value "many"/],
    ['kvserve_request_kv_max 0;', qr/invalid value "0" in "kvserve_request_kv_max" directive, it must be a fraction/],
    ['kvserve_request_kv_max 1.5;', qr/invalid value "1.5"/],
    ['kvserve_request_kv_max quarter;', qr/invalid value "quarter"/],
    ['kvserve_request_kv_max 0.25; kvserve_request_kv_max 0.5;',
     qr/"kvserve_request_kv_max" directive is duplicate/],
) {
    my ($conf, $re) = @$c;
    my ($failed, $out) = nginx_t("    kvserve_model kvserve-tiny $model;\n"
                                 . "    $conf\n");
    ok($failed, "nginx -t refuses $conf");
    like($out, $re, "... and says why") or diag $out;
}

for my $conf ('kvserve_max_sequences 1;', 'kvserve_max_sequences 16384;',
              'kvserve_request_kv_max 1;', 'kvserve_request_kv_max off;',
              'kvserve_request_kv_max 0.05;')
{
    my ($failed, $out) = nginx_t("    kvserve_model kvserve-tiny $model;\n"
                                 . "    $conf\n");
    ok(!$failed, "nginx -t accepts $conf") or diag $out;
}

done_testing();
