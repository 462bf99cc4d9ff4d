# Token limits under concurrency (issue 7, "Done when"): 200 requests
# from one key at once, against a budget that admits exactly 20 of them,
# on nginx with worker_processes 4 (reuseport, so the connections spread
# over the workers): exactly 20 pass, because each admission charges the
# shared bucket under the zone's mutex before the next one is decided.
#
# Each request costs 4 prompt tokens (a token id list) + 16 reserved; the
# model's end tokens are banned so every admitted request generates all
# 16 and nothing is refunded; the bucket (burst 400) refills at 1 token a
# minute, nothing within the test.  A second round with 10 keys x 20
# requests each against a burst of 100 admits exactly 5 per key.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(time sleep);

my $t = Kvserve::Live->new('014-limit');
my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_engine_timeout 60s;

    kvserve_limit_zone \$arg_k zone=one:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=two:1m rate=1t/m;
EOC
    workers => 4, error_level => 'notice', connections => 1024,
    listen => 'reuseport',
    server => <<"EOS");
        add_header x-pid \$pid always;
        location /v1/ { kvserve; kvserve_limit zone=one burst=400 nodelay; }
        location /two/v1/ {
            kvserve;
            kvserve_limit zone=two burst=100 nodelay;
        }
        location /free/v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
EOS

my $body = '{"model": "kvserve-tiny", "prompt": [1, 2, 3, 4], '
    . '"max_tokens": 16, '
    . '"logit_bias": {"507": -100, "508": -100, "511": -100}}';

# Every request connected and sent but its body's last byte, then the
# last bytes in one sweep, then every response read: [status, pid].
sub burst {
    my (@paths) = @_;
    my @s;
    for my $p (@paths) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port, Proto => 'tcp',
                                      Timeout => 10)
            or die "connect: $!";
        my $req = "POST $p HTTP/1.1\r\nHost: localhost\r\n"
            . "Connection: close\r\nContent-Length: " . length($body)
            . "\r\n\r\n$body";
        syswrite($s, substr($req, 0, -1)) == length($req) - 1
            or die "write: $!";
        push @s, [$s, substr($req, -1)];
    }
    syswrite($_->[0], $_->[1]) for @s;

    my %got = map { (fileno($_->[0]) => '') } @s;
    my %sock = map { (fileno($_->[0]) => $_->[0]) } @s;
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
    return map {
        my $r = $got{fileno $_->[0]};
        close $_->[0];
        my ($st) = $r =~ m{^HTTP/1\.1 (\d+)};
        my ($pid) = $r =~ /^x-pid: (\d+)\r$/mi;
        [$st // 0, $pid // 0]
    } @s;
}

sub metric {
    my ($name, $zone) = @_;
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my (undef, $b) = $t->split_response($r);
    return $b =~ /^\Q$name\E\{zone="\Q$zone\E"\} (\d+)$/m ? $1 : undef;
}

ok($t->start, 'nginx started');

# the engine up before the burst, so that nothing waits for it
ok($t->wait_for(sub {
       my $r = $t->read_all($t->request('POST', '/free/v1/completions',
                                        $body), 30);
       return $r =~ m{^HTTP/1\.1 200};
   }, 30), 'the engine answers');

my @r = burst(('/v1/completions?k=tenant') x 200);
my %st;
$st{$_->[0]}++ for @r;
is($st{200} // 0, 20, '200 at once from one key: exactly 20 pass');
is($st{429} // 0, 180, '... and 180 get 429');
my %pids = map { ($_->[1] => 1) } @r;
cmp_ok(scalar(keys %pids), '>', 1,
       'the requests were spread over ' . scalar(keys %pids) . ' workers');

is(metric('kvserve:limit_passed_total', 'one'), 20, 'metrics: 20 passed');
is(metric('kvserve:limit_rejected_total', 'one'), 180,
   'metrics: 180 rejected');
is(metric('kvserve:limit_tokens_charged_total', 'one'), 400,
   'metrics: 400 tokens charged');
is(metric('kvserve:limit_tokens_refunded_total', 'one'), 0,
   'metrics: nothing refunded (every request used its 16)');

# ten keys at once, 20 requests each, a burst of 100: 5 per key
my @paths = map { my $k = $_; map { "/two/v1/completions?k=t$k" } 1 .. 20 }
            1 .. 10;
@r = burst(@paths);
my %per;
for my $i (0 .. $#r) {
    my ($k) = $paths[$i] =~ /k=(\w+)/;
    $per{$k}{$r[$i][0]}++;
}
my @wrong = grep { ($per{$_}{200} // 0) != 5 } sort keys %per;
is(scalar(@wrong), 0, '10 keys x 20 at once: exactly 5 pass per key')
    or diag join ', ', map { "$_: " . ($per{$_}{200} // 0) } @wrong;
is(metric('kvserve:limit_keys', 'two'), 10, 'the zone holds 10 keys');

done_testing();
