# LoRA adapters through nginx (issue 25, docs/lora.md): a generated F32
# base, two adapters of it made by `kvserve gen-lora` (ranks 8 and 64)
# and adapter A merged into a model of its own by `kvserve merge-lora`
# (the oracle), served side by side:
#
#   - /v1/models lists base:A and base:B after the base;
#   - greedy text under base:A equals the merged model's, alone and with
#     requests of A, B, the base and the merged model in flight together
#     (the base's engine mixes A, B and the base in its steps);
#   - the same prompt under A and under B: no cached token across them, a
#     full hit within one ($kvserve_cached_tokens and
#     $kvserve_cache_miss_reason in an access log);
#   - kvserve_lora_map from the tenant: a mapped tenant asking for the
#     base is served under its adapter, one asking for another adapter
#     gets 404 naming the model id, an unmapped tenant cannot pick one;
#   - adapter A's file replaced and nginx reloaded: the base's engine is
#     kept (the same pid), A's text changes, the old prompt under A
#     reuses nothing of the old file's blocks and the miss says `epoch`,
#     and the base's cached prompt still hits in full;
#   - paging: kvserve_lora_slots 1 for the two adapters, so A and B take
#     turns in the one slot; the metrics count the loads, evictions and
#     waits, and the loads' times (the loader's, the step loop's
#     installs and the longest one) are exported and grow with a load;
#   - `nginx -t` refuses an adapter made for another base, naming the
#     adapter, the tensor and both shapes;
#   - a second configuration: 8 adapters of the base (ranks 8 and 64),
#     all resident, and each merged into a model of its own: the 8
#     adapters and the base asked for at once, twice over, so the
#     base's engine runs them in the same steps; each greedy reply is
#     its merged model's (the base's for the base).
#
# One nginx of our own (Kvserve::Live); every process it started is
# killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep);

my $t = Kvserve::Live->new('042', 'models');
my $root = $t->root;
my $dir = "$root/models";
$t->cli;

END { $t->stop if $t }

sub cli_ok { $t->cli_ok(@_) }

my $shape = '--heads 4 --kv-heads 2 --layers 2 --vocab 512';
cli_ok('a base generated',
       "gen-model --dim 64 --ffn 128 $shape --seed 25 --name lbase"
       . " $dir/base.gguf");
cli_ok('adapter A (rank 8)', "gen-lora $dir/base.gguf --rank 8 --seed 1"
       . " $dir/a.gguf");
cli_ok('adapter B (rank 64)', "gen-lora $dir/base.gguf --rank 64 --seed 2"
       . " $dir/b.gguf");
cli_ok('A merged', "merge-lora $dir/base.gguf $dir/a.gguf $dir/merged.gguf");
cli_ok('a wider base', "gen-model --dim 96 --ffn 128 $shape --seed 26"
       . " --name wide $dir/wide.gguf");
cli_ok('an adapter of it', "gen-lora $dir/wide.gguf --rank 8 --seed 3"
       . " $dir/wide-a.gguf");

# ---- nginx -t: an adapter that does not fit its base ---------------------

my ($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n"
                                 . "kvserve_lora W $dir/wide-a.gguf;");
ok($failed, 'nginx -t refuses an adapter of another base');
like($out, qr/kvserve_lora "W" for model "base": \S+wide-a\.gguf: adapter tensors blk\.0\.attn_q\.weight\.lora_a \[96, 8\] and \.lora_b \[8, 96\] do not fit the base's blk\.0\.attn_q\.weight \[64, 64\]/,
     '... naming the adapter, the tensor and both shapes') or diag($out);

($failed, $out) = $t->nginx_t("kvserve_lora A $dir/a.gguf;");
ok($failed, 'nginx -t refuses an adapter before any model');
like($out, qr/kvserve_lora "A": no kvserve_model before it/, '... saying so');

($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n"
                              . "kvserve_lora A $dir/a.gguf base=nope;");
ok($failed, 'nginx -t refuses base= naming no model');
like($out, qr/base="nope" is no kvserve_model/, '... naming it');

($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n"
                              . "kvserve_lora A:x $dir/a.gguf;");
ok($failed, 'nginx -t refuses a bad adapter name');
like($out, qr/invalid adapter name "A:x"/, '... quoting it');

($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n"
                              . "kvserve_lora A $dir/a.gguf;\n"
                              . "kvserve_lora B $dir/b.gguf base=base;");
ok(!$failed, 'nginx -t accepts the good ones') or diag($out);

my $many = join '', map { "kvserve_lora a$_ $dir/a.gguf;\n" } 1 .. 65;
($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n$many");
ok($failed, 'nginx -t refuses 65 adapters without kvserve_lora_slots');
like($out, qr/model "base" has 65 LoRA adapters, more than an engine holds at once \(64\): set kvserve_lora_slots/, '... saying so');
($failed, $out) = $t->nginx_t("kvserve_model base $dir/base.gguf;\n$many"
                              . "kvserve_lora_slots 8;");
ok(!$failed, '... and takes them with kvserve_lora_slots 8') or diag($out);
($failed, $out) = $t->nginx_t("kvserve_lora_slots 65;");
ok($failed, 'nginx -t refuses kvserve_lora_slots 65');
like($out, qr/invalid value "65" in "kvserve_lora_slots" directive, it must be a number from 1 to 64/, '... quoting it');

# ---- serving --------------------------------------------------------------

my $http = <<"EOC";
    kvserve_model base $dir/base.gguf;
    kvserve_lora A $dir/a.gguf;
    kvserve_lora B $dir/b.gguf base=base;
    kvserve_model merged $dir/merged.gguf;
    kvserve_lora_slots 1;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    log_format cache 'C id=\$http_x_test_id model=\$kvserve_model '
                     'pt=\$kvserve_prompt_tokens ct=\$kvserve_cached_tokens '
                     'miss=\$kvserve_cache_miss_reason';
    map \$http_x_tenant \$lora {
        acme    A;
        beta    "";
        default "";
    }
EOC
my $server = <<"EOS";
        location /v1/ { kvserve; access_log logs/cache.log cache; }
        location /t/ {
            kvserve;
            kvserve_tenant \$http_x_tenant;
            kvserve_lora_map \$lora;
            access_log logs/cache.log cache;
        }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
EOS
$t->write_conf($http, server => $server);
ok($t->start, 'nginx started with the base, its adapters and the merged '
   . 'model');

sub send_req {
    my ($uri, $model, $prompt, $id, $tenant) = @_;
    my $body = JSON::PP::encode_json({ model => $model, prompt => $prompt,
                                       max_tokens => 12, temperature => 0,
                                       ignore_eos => JSON::PP::true });
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $t->port, Proto => 'tcp',
                                  Timeout => 10) or die "connect: $!";
    print $s "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "X-Test-Id: $id\r\n"
        . (defined $tenant ? "X-Tenant: $tenant\r\n" : '')
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

# (status, text, body) of a response
sub answer {
    my ($s) = @_;
    my ($head, $body) = $t->split_response($t->read_all($s, 60));
    my ($code) = $head =~ m{^HTTP/1\.1 (\d+)};
    my $j = eval { JSON::PP::decode_json($body) } || {};
    return ($code // 0, $j->{choices}[0]{text}, $body);
}

sub complete {
    my ($model, $prompt, $id, %o) = @_;
    return answer(send_req($o{uri} // '/v1/completions', $model, $prompt,
                           $id, $o{tenant}));
}

# the access log line of request $id: (cached, miss)
sub logged {
    my ($id) = @_;
    my $line;
    $t->wait_for(sub {
        open my $fh, '<', "$root/logs/cache.log" or return 0;
        ($line) = grep { / id=\Q$id\E / } <$fh>;
        return defined $line;
    }, 10);
    return () unless defined $line;
    my ($ct) = $line =~ / ct=(\d+)/;
    my ($miss) = $line =~ / miss=(\S+)/;
    return ($ct, $miss);
}

# the cache first, while each namespace is empty: one prompt under A, A
# again, B and the base (a full hit is every whole block cached: the
# prompt and the reply but its last token)
my $p2 = join ' ', ('the cache keeps blocks of tokens for reuse') x 6;
my (undef, $text_a2) = complete('base:A', $p2, 'ca1');
complete('base:A', $p2, 'ca2');
complete('base:B', $p2, 'cb1');
complete('base', $p2, 'cbase');
my ($ct, $miss) = logged('ca1');
is($ct, 0, 'A: the first time nothing is cached');
is(do {
    open my $fh, '<', "$root/logs/cache.log" or die;
    my ($l) = grep { / id=ca1 / } <$fh>;
    ($l // '') =~ / model=(\S+)/ ? $1 : '';
}, 'base:A', '$kvserve_model is the adapter\'s model id');
my ($ct2, $miss2) = logged('ca2');
my ($pt) = do {
    open my $fh, '<', "$root/logs/cache.log" or die;
    my ($l) = grep { / id=ca2 / } <$fh>;
    $l =~ / pt=(\d+)/;
};
ok($pt > 32, "the prompt is $pt tokens");
is($ct2, $pt - 1 < int(($pt + 11) / 16) * 16 ? $pt - 1
         : int(($pt + 11) / 16) * 16, "A again: a full hit ($ct2)")
    or diag("miss $miss2");
like($miss2, qr/^(?:none|no_entry)$/, "... nothing more cached ($miss2)");
($ct, $miss) = logged('cb1');
is($ct, 0, 'B: nothing of A\'s reused');
like($miss, qr/^(?:epoch|adapter)$/, "... the miss says why ($miss)");
($ct, $miss) = logged('cbase');
is($ct, 0, 'the base: nothing of A\'s reused');
like($miss, qr/^(?:epoch|adapter)$/, "... the miss says why ($miss)");

my $r = $t->read_all($t->request('GET', '/v1/models'), 10);
my (undef, $mb) = $t->split_response($r);
my $ml = eval { JSON::PP::decode_json($mb) } || {};
is_deeply([map { $_->{id} } @{$ml->{data} || []}],
          [qw(base base:A base:B merged)],
          '/v1/models lists the adapters after their base') or diag($r);
$r = $t->read_all($t->request('GET', '/v1/models/base:B'), 10);
like($r, qr{^HTTP/1\.1 200 .*"id":\s*"base:B"}s, '... and retrieves one');

my $p1 = 'Once upon a time there was a little robot who liked to';
my ($c, $text_base) = complete('base', $p1, 'base1');
is($c, 200, 'the base answers');
my ($ca, $text_a) = complete('base:A', $p1, 'a1');
is($ca, 200, 'base:A answers');
my ($cm, $text_m) = complete('merged', $p1, 'm1');
is($cm, 200, 'the merged model answers');
my ($cb, $text_b) = complete('base:B', $p1, 'b1');
is($cb, 200, 'base:B answers');
ok(defined $text_a && length $text_a, 'text under A');
is($text_a, $text_m, 'greedy text under A is the merged model\'s');
isnt($text_a, $text_base, '... not the base\'s');
isnt($text_b, $text_a, 'B\'s is another');

# all at once, twice each: the base's engine mixes A, B and the base
my @jobs = map { [$_, "mix-$_->[0]-$_->[1]"] }
           map { my $k = $_; map { [$_, $k] } qw(base base:A base:B merged) }
           1 .. 2;
my @socks = map { send_req('/v1/completions', $_->[0][0], $p1, $_->[1]) }
            @jobs;
my %want = (base => $text_base, 'base:A' => $text_a, 'base:B' => $text_b,
            merged => $text_m);
for my $i (0 .. $#jobs) {
    my ($code, $text, $body) = answer($socks[$i]);
    my $m = $jobs[$i][0][0];
    is($code, 200, "concurrent $m ($jobs[$i][1]): 200") or diag($body);
    is($text, $want{$m}, "... the same text as alone");
}

# Anthropic's /v1/messages selects an adapter the same way
{
    my $body = JSON::PP::encode_json({ model => 'base:B', max_tokens => 4,
        messages => [{ role => 'user', content => 'Hello there' }] });
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $t->port, Proto => 'tcp',
                                  Timeout => 10) or die "connect: $!";
    print $s "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\n"
        . "anthropic-version: 2023-06-01\r\nConnection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    my ($head, $b) = $t->split_response($t->read_all($s, 60));
    like($head, qr{^HTTP/1\.1 200}, '/v1/messages with base:B: 200')
        or diag($b);
    like($b, qr/"model":\s*"base:B"/, '... naming it');
}

# paging: one slot for two adapters; A and B took turns in it
{
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my %v;
    while ($r =~ /^kvserve:(lora_\w+)\{model_name="base"\} (\S+)$/mg) {
        $v{$1} = $2;
    }
    is($v{lora_adapters}, 2, 'metrics: 2 adapters') or diag($r);
    is($v{lora_slots}, 1, '... 1 slot');
    is($v{lora_resident}, 1, '... 1 resident');
    is($v{lora_waiting}, 0, '... no request waiting');
    ok(($v{lora_loads_total} // 0) >= 2, "... loads ($v{lora_loads_total})");
    ok(($v{lora_evictions_total} // 0) >= 2,
       "... evictions ($v{lora_evictions_total})");
    ok(($v{lora_waited_total} // 0) >= 2,
       "... requests that waited ($v{lora_waited_total})");
    ok(defined $v{lora_wait_seconds_total}, '... their time');
    unlike($r, qr/^kvserve:lora_\w+\{model_name="merged"\}/m,
           '... none for a model without adapters');

    # the loads' times: there after loads, and growing with the next
    # ones (A then B: at least one of them is not in the one slot)
    ok(($v{lora_load_seconds_total} // 0) > 0,
       "... the loader's time ($v{lora_load_seconds_total})");
    ok(($v{lora_install_seconds_total} // 0) > 0,
       "... the step loop's installs ($v{lora_install_seconds_total})");
    ok(($v{lora_install_max_seconds} // 0) > 0
       && $v{lora_install_max_seconds} <= $v{lora_install_seconds_total},
       "... the longest one ($v{lora_install_max_seconds}), at most "
       . 'their sum');
    like($r, qr/^# TYPE kvserve:lora_load_seconds_total counter$/m,
         '... a counter');
    like($r, qr/^# TYPE kvserve:lora_install_max_seconds gauge$/m,
         '... the longest a gauge');
    my ($ca2) = complete('base:A', $p1, 'load-a');
    my ($cb2) = complete('base:B', $p1, 'load-b');
    is("$ca2 $cb2", '200 200', 'A then B again: 200');
    my %w;
    for (1 .. 50) {
        my $r2 = $t->read_all($t->request('GET', '/metrics'), 10);
        %w = ();
        while ($r2 =~ /^kvserve:(lora_\w+)\{model_name="base"\} (\S+)$/mg) {
            $w{$1} = $2;
        }
        last if ($w{lora_loads_total} // 0) > $v{lora_loads_total};
        sleep(0.1);
    }
    ok(($w{lora_loads_total} // 0) > $v{lora_loads_total},
       "... more loads ($v{lora_loads_total} -> $w{lora_loads_total})");
    ok(($w{lora_load_seconds_total} // 0) > $v{lora_load_seconds_total},
       "... the loader's time grew ($v{lora_load_seconds_total} -> "
       . "$w{lora_load_seconds_total})");
    ok(($w{lora_install_seconds_total} // 0)
       > $v{lora_install_seconds_total},
       "... the installs' time grew ($v{lora_install_seconds_total} -> "
       . "$w{lora_install_seconds_total})");
    ok(($w{lora_install_max_seconds} // 0) >= $v{lora_install_max_seconds}
       && $w{lora_install_max_seconds} <= $w{lora_install_seconds_total},
       "... the longest one ($w{lora_install_max_seconds}) never less");
}

# the tenant's map
my ($code, $text) = complete('base', $p1, 'map1', uri => '/t/v1/completions',
                             tenant => 'acme');
is($code, 200, 'a mapped tenant asking for the base: 200');
is($text, $text_a, '... served under its adapter');
($code, $text) = complete('base:A', $p1, 'map2', uri => '/t/v1/completions',
                          tenant => 'acme');
is($code, 200, '... asking for its own adapter: 200');
is($text, $text_a, '... served under it');
my $body;
($code, $text, $body) = complete('base:B', $p1, 'map3',
                                 uri => '/t/v1/completions',
                                 tenant => 'acme');
is($code, 404, '... asking for another adapter: 404');
like($body, qr/The model `base:B` does not exist or you do not have access/,
     '... naming the model id');
($code, $text, $body) = complete('base:A', $p1, 'map4',
                                 uri => '/t/v1/completions',
                                 tenant => 'beta');
is($code, 404, 'a tenant mapped to the base asking for an adapter: 404');
($code, $text) = complete('base', $p1, 'map5', uri => '/t/v1/completions',
                          tenant => 'beta');
is($code, 200, '... asking for the base: 200');
is($text, $text_base, '... the base\'s text');

# a replaced adapter file: reload
my $pid_before = $t->engine_pid;
cli_ok('another adapter A', "gen-lora $dir/base.gguf --rank 8 --seed 7"
       . " $dir/a2.gguf");
rename "$dir/a2.gguf", "$dir/a.gguf" or die "rename: $!";
kill 'HUP', $t->master_pid;
my ($new_text, $probe);
ok($t->wait_for(sub {
    $probe = 'probe' . int(rand 1e9);
    my ($code2, $text2) = complete('base:A', $p2, $probe);
    $new_text = $text2;
    return $code2 == 200 && defined $text2 && $text2 ne $text_a2;
}, 60), 'after a reload base:A serves the new file') or diag($new_text);
($ct, $miss) = logged($probe);
is($ct, 0, '... and reuses nothing of the old adapter\'s blocks');
is($miss, 'epoch', "... the miss says why ($miss)");
is($t->engine_pid, $pid_before, 'the base\'s engine was kept');
complete('base', $p2, 'cbase2');
($ct, $miss) = logged('cbase2');
is($ct, $ct2, "the base's cached prompt still hits in full ($ct)")
    or diag("miss $miss");
(undef, $text) = complete('base:A', $p2, 'ca3');
is($text, $new_text, 'the new A again: the same text');
($ct, $miss) = logged('ca3');
is($ct, $ct2, "... a full hit within the new file's blocks ($ct)");

# ---- 8 adapters and the base in flight together ---------------------------

$t->stop;
for my $i (1 .. 8) {
    my $rank = $i % 2 ? 8 : 64;
    cli_ok("adapter e$i (rank $rank)", "gen-lora $dir/base.gguf --rank $rank"
           . " --seed " . (40 + $i) . " $dir/e$i.gguf");
    cli_ok("... merged", "merge-lora $dir/base.gguf $dir/e$i.gguf"
           . " $dir/me$i.gguf");
}
my $http8 = "    kvserve_model base $dir/base.gguf;\n"
    . join('', map { "    kvserve_lora e$_ $dir/e$_.gguf;\n" } 1 .. 8)
    . join('', map { "    kvserve_model m$_ $dir/me$_.gguf;\n" } 1 .. 8)
    . "    kvserve_kv_cache 64m;\n    kvserve_threads 1;\n"
    . "    kvserve_engine_wait 60s;\n";
$t->write_conf($http8, server => <<"EOS");
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
EOS
ok($t->start, 'nginx with 8 adapters of the base and their merged models');

my %want8;
(undef, $want8{0}) = complete('base', $p1, 'b8');
for my $i (1 .. 8) {
    my ($c8, $x8) = complete("m$i", $p1, "m8-$i");
    is($c8, 200, "merged model m$i answers");
    $want8{$i} = $x8;
    isnt($x8, $want8{0}, '... not the base\'s text');
}
my %distinct = map { ($want8{$_} // '') => 1 } 1 .. 8;
is(scalar(keys %distinct), 8, 'the 8 merged models\' texts all differ');

# the 9 at once, twice over: 18 requests in flight on one engine
my @all8 = map { my $k = $_; map { [$_, "all8-$k-$_"] } 0 .. 8 } 1 .. 2;
my @s8 = map { send_req('/v1/completions',
                        $_->[0] ? "base:e$_->[0]" : 'base', $p1, $_->[1]) }
         @all8;
for my $k (0 .. $#all8) {
    my ($i, $id) = @{$all8[$k]};
    my ($code8, $text8, $body8) = answer($s8[$k]);
    is($code8, 200, "$id: 200") or diag($body8);
    is($text8, $want8{$i}, $i ? "... base:e${i}'s text is merged m${i}'s"
                              : '... the base\'s text');
}
{
    # /metrics answers from the engine's last stats reply, which may
    # predate the last loads: asked again until it shows them (5 s)
    my ($r8, $res);
    for (1 .. 50) {
        $r8 = $t->read_all($t->request('GET', '/metrics'), 10);
        ($res) = $r8 =~ /^kvserve:lora_resident\{model_name="base"\} (\S+)$/m;
        last if defined $res && $res == 8;
        select(undef, undef, undef, 0.1);
    }
    is($res, 8, 'the 8 adapters resident together') or diag($r8);
}

done_testing();
