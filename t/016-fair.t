# Fair share between tenants inside the engine (issue 7 point 4 and 5,
# docs/limits.md "Fair share inside the engine") on one nginx of our own
# with the tiny default model: the tenant of a request is the XXH3-128 of
# the key of its first kvserve_limit zone, sent to the engine, and the
# engine's per-tenant served tokens come back in kvserve_metrics, by the
# first 12 hex digits of that hash (never the key itself).
#
# Exact by definition: the prompts are token ids; the end tokens (BOS 507,
# EOS 508, EOT 511) are banned so that every choice generates all of its
# max_tokens (finish_reason "length"); the prefix cache is off, so every
# prompt token is computed and a reply's last token is never computed
# (no tail step).  The engine computes, per request, the prompt's tokens
# (prefill) and every generated token but the last, which is sampled and
# never fed back (decode): prefill = usage.prompt_tokens, decode =
# usage.completion_tokens - 1 (one choice).
#
# The expected hash prefixes are libxxhash's XXH3-128 of the keys in its
# canonical form (what `xxhsum -H2` prints: high 64 bits then low, big
# endian), computed with a throwaway program outside the module:
#   sk-alice-0001  a50dec5dba71b2d2cee3b69a05aa0ddc
#   sk-bob-0002    b7605eacf740e487952087925a49c7b7
#   sk-dave-0003   897aae8096865dc2174622bf5eceb67e
#   127.0.0.1      466b3d5fabfe5f01b82abd3e46d2c5dd (the 4 address bytes
#                  7f 00 00 01: a request no zone applies to is its
#                  client address's tenant)
#
# Then `nginx -t` refuses bad kvserve_fair_weights and kvserve_fair_kv_max
# values, naming them.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use JSON::PP ();

my $t = Kvserve::Live->new('016-fair');
my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

my %hash = (
    'sk-alice-0001' => 'a50dec5dba71',
    'sk-bob-0002'   => 'b7605eacf740',
    'sk-dave-0003'  => '897aae809686',
);

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_prefix_cache off;
    kvserve_fair_weights prefill=1 decode=3;
    kvserve_fair_kv_max 0.75;

    kvserve_limit_zone \$http_authorization zone=keys:1m rate=100000t/s;
    kvserve_limit_zone "all" zone=all:1m rate=100000t/s;
EOC
    server => <<"EOS");
        location /v1/ {
            kvserve;
            kvserve_limit zone=keys nodelay;
            kvserve_limit zone=all nodelay;
        }
        location /free/v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS

my $ban = '"logit_bias": {"507": -100, "508": -100, "511": -100}';

# POST a completion of $prompt (a list of ids) for $max tokens with
# $key as the Authorization header (none when undef); its usage.
sub complete {
    my ($path, $key, $prompt, $max) = @_;
    my $body = '{"model": "kvserve-tiny", "prompt": ['
        . join(', ', @$prompt) . qq(], "max_tokens": $max, $ban});
    my $auth = defined $key ? "Authorization: $key\r\n" : '';
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s "POST $path HTTP/1.1\r\nHost: localhost\r\n$auth"
        . "Content-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
    my $r = $t->read_all($s, 30);
    my ($head, $b) = $t->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    return undef unless ($status // 0) == 200;
    my $j = JSON::PP::decode_json($b);
    return undef unless $j->{choices}[0]{finish_reason} eq 'length';
    return $j->{usage};
}

sub metrics {
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my (undef, $b) = $t->split_response($r);
    return $b // '';
}

# The value of $name for $tenant in $text, or undef.
sub tenant_metric {
    my ($text, $name, $tenant) = @_;
    return $text =~ /^\Q$name\E\{model_name="kvserve-tiny",tenant="\Q$tenant\E"\} (\d+)$/m
        ? $1 : undef;
}

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

# what each tenant's responses say the engine computed for it
my %want;

sub served {
    my ($tenant, $u) = @_;
    $want{$tenant}{prefill} += $u->{prompt_tokens};
    $want{$tenant}{decode} += $u->{completion_tokens} - 1;
}

for my $req (
    ['sk-alice-0001', [1, 2, 3, 4], 6],
    ['sk-alice-0001', [5, 6, 7, 8, 9, 10, 11], 3],
    ['sk-bob-0002', [12, 13, 14], 9],
) {
    my ($key, $prompt, $max) = @$req;
    my $u = complete('/v1/completions', $key, $prompt, $max);
    ok($u, "$key: a completion of " . scalar(@$prompt)
           . " prompt tokens, $max generated");
    is($u->{prompt_tokens}, scalar @$prompt, "$key: usage prompt_tokens");
    is($u->{completion_tokens}, $max, "$key: usage completion_tokens");
    served($hash{$key}, $u) if $u;
}

# no kvserve_limit zone applies: the tenant of the client address
{
    my $u = complete('/free/v1/completions', 'sk-carol', [20, 21], 4);
    ok($u, 'a request without a zone');
    served('466b3d5fabfe', $u) if $u;
}

# alice: 4 + 7 prompt tokens, 5 + 2 decoded; bob: 3 and 8 (by hand)
is_deeply($want{$hash{'sk-alice-0001'}}, { prefill => 11, decode => 7 },
          'alice: what her usage implies');
is_deeply($want{$hash{'sk-bob-0002'}}, { prefill => 3, decode => 8 },
          'bob: what his usage implies');

# a tenant's KV blocks are counted as of the engine's last step: the last
# request's tenant still shows the blocks of its last step while the
# engine idles, so one more tenant comes last
{
    my $u = complete('/v1/completions', 'sk-dave-0003', [30, 31, 32], 2);
    ok($u, 'sk-dave-0003: the last request');
    served($hash{'sk-dave-0003'}, $u) if $u;
}

# the engine publishes at the end of a step: poll until it shows all
my $m = '';
ok($t->wait_for(sub {
    $m = metrics();
    for my $tn (keys %want) {
        for my $k ('prefill', 'decode') {
            my $v = tenant_metric($m, "kvserve:tenant_${k}_tokens_total",
                                  $tn);
            return 0 unless defined $v && $v == $want{$tn}{$k};
        }
    }
    return 1;
}, 10), 'the metrics reach what the responses imply') or diag $m;

for my $tn (sort keys %want) {
    is(tenant_metric($m, 'kvserve:tenant_prefill_tokens_total', $tn),
       $want{$tn}{prefill}, "tenant $tn: prefill tokens");
    is(tenant_metric($m, 'kvserve:tenant_decode_tokens_total', $tn),
       $want{$tn}{decode}, "tenant $tn: decode tokens");
    next if $tn eq $hash{'sk-dave-0003'};
    is(tenant_metric($m, 'kvserve:tenant_kv_blocks', $tn), 0,
       "tenant $tn: holds no KV block once done");
}

like($m, qr/^# TYPE kvserve:tenant_prefill_tokens_total counter$/m,
     'tenant_prefill_tokens_total is a counter');
like($m, qr/^# TYPE kvserve:tenant_kv_blocks gauge$/m,
     'tenant_kv_blocks is a gauge');
my @labels = $m =~ /^kvserve:tenant_decode_tokens_total\{[^}]*tenant="([^"]*)"\}/mg;
is_deeply([sort @labels], [sort keys %want],
          'one series per tenant, none for "other" (all are shown)');
unlike($m, qr/sk-alice|sk-bob|sk-carol|sk-dave/,
       'no key appears in the metrics');
unlike($m, qr/a50dec5dba71b|b7605eacf740e/,
       'no more than 12 hex digits of a hash');

# ---- nginx -t ----------------------------------------------------------------

sub nginx_t { return $t->nginx_t($_[0]) }

for my $c (
    ['kvserve_fair_weights prefill=0;', qr/invalid value "prefill=0"/],
    ['kvserve_fair_weights decode=1001;', qr/invalid value "decode=1001"/],
    ['kvserve_fair_weights prefill=x decode=2;',
     qr/invalid value "prefill=x"/],
    ['kvserve_fair_weights prefill=-1;', qr/invalid value "prefill=-1"/],
    ['kvserve_fair_weights tokens=3;', qr/invalid parameter "tokens=3"/],
    ['kvserve_fair_weights prefill=1 prefill=2;',
     qr/duplicate parameter "prefill=2"/],
    ['kvserve_fair_weights decode=2; kvserve_fair_weights decode=3;',
     qr/"kvserve_fair_weights" directive is duplicate/],
    ['kvserve_fair_kv_max 0;', qr/invalid value "0"/],
    ['kvserve_fair_kv_max 0.000;', qr/invalid value "0.000"/],
    ['kvserve_fair_kv_max 1.5;', qr/invalid value "1.5"/],
    ['kvserve_fair_kv_max 1.0001;', qr/invalid value "1.0001"/],
    ['kvserve_fair_kv_max 50%;', qr/invalid value "50%"/],
    ['kvserve_fair_kv_max -0.5;', qr/invalid value "-0.5"/],
    ['kvserve_fair_kv_max .;', qr/invalid value "."/],
    ['kvserve_fair_kv_max on;', qr/invalid value "on"/],
    ['kvserve_fair_kv_max 0.5; kvserve_fair_kv_max off;',
     qr/"kvserve_fair_kv_max" directive is duplicate/],
) {
    my ($failed, $out) = nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]");
}

for my $good (
    'kvserve_fair_weights prefill=1000 decode=1;',
    'kvserve_fair_weights decode=5;',
    'kvserve_fair_kv_max 1;',
    'kvserve_fair_kv_max 0.001;',
    'kvserve_fair_kv_max .25;',
    'kvserve_fair_kv_max off;',
) {
    my ($failed, $out) = nginx_t($good);
    ok(!$failed, "nginx -t passes: $good") or diag $out;
}

done_testing();
