# A reload that changes the models (docs/engine-process.md, "The
# engine's life"; issue 5 point 4), on one nginx of our own with
# worker_processes 2:
#
# nginx starts with model A (the tiny default model) and a long stream
# is started; the configuration is changed to model B (stories260K when
# the fixtures are there, else a copy of the default model under another
# path and mtime) and the master gets HUP.  The new workers find the old
# engine's HELLO naming other files and send DRAIN: the old engine stops
# listening and releases the lease, keeps serving the old workers' stream
# to its [DONE], and exits once they are gone; a request for model B is
# served by a new engine meanwhile.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use IO::Socket::INET ();
use IO::Select ();
use JSON::PP ();
use File::Copy ();
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep time);
use Cwd ();

my $nginx = $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES};
my $model_dir = $ENV{TEST_NGINX_MODEL_DIR};
plan skip_all => 'TEST_NGINX_LOAD_MODULES and TEST_NGINX_MODEL_DIR needed'
    unless $module && $model_dir;

# beside the runner's servroot, which it empties as it likes
my $root = ($ENV{TEST_NGINX_SERVROOT} // '/tmp/kvserve-t') . '-011';
remove_tree($root);
make_path("$root/conf", "$root/logs", "$root/engine", "$root/models");

# A: the tiny default model, its end tokens (507, 508, 511) banned so the
# stream runs to max_tokens
my $model_a = "$model_dir/default.gguf";
my $bias = '{"507": -100, "508": -100, "511": -100}';
my $max_tokens = 480;

# B: another file
my $fixture = Cwd::getcwd() . "/../shared/fixtures/models/stories260K-f32.gguf";
my $model_b = "$root/models/b.gguf";
if (-f $fixture) {
    $model_b = $fixture;
} else {
    File::Copy::copy($model_a, $model_b) or die "copy: $!";
    # another identity even within the same second
    my $t = (stat $model_a)[9] - 100;
    utime $t, $t, $model_b or die "utime: $!";
}

my $port = do {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

sub write_conf {
    my ($name, $model) = @_;
    open my $cf, '>', "$root/conf/nginx.conf.new" or die "conf: $!";
    print $cf <<"EOC";
load_module $module;
worker_processes 2;
daemon on;
master_process on;
error_log logs/error.log info;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path logs/body;
    kvserve_model $name $model;
    kvserve_kv_cache 64m;
    kvserve_threads 1;
    kvserve_engine_dir $root/engine;
    kvserve_engine_wait 20s;
    server {
        listen 127.0.0.1:$port;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
    }
}
EOC
    close $cf;
    rename "$root/conf/nginx.conf.new", "$root/conf/nginx.conf"
        or die "rename: $!";
}

my $log = "$root/logs/error.log";
my %engines;    # every engine pid seen, for END

sub master_pid {
    open my $fh, '<', "$root/logs/nginx.pid" or return;
    my $p = <$fh>;
    chomp $p if defined $p;
    return $p;
}

sub lease_pid {
    open my $fh, '<', "$root/engine/engine.lock" or return;
    my ($p) = (<$fh> // '') =~ /^(\d+) /;
    return $p;
}

sub alive {
    my $p = shift;
    return 0 unless kill 0, $p;
    my $st = `cat /proc/$p/stat 2>/dev/null`;
    return $st ne '' && $st !~ /^\d+ \(.*\) Z/;
}

END {
    my $m = master_pid();
    kill 'TERM', $m if $m;
    for my $p (grep { $_ } keys %engines, lease_pid()) {
        kill 'KILL', $p;
    }
    if ($m) {
        for (1 .. 50) {
            last unless kill 0, $m;
            sleep 0.1;
        }
        kill 'KILL', $m if kill 0, $m;
    }
}

write_conf('m', $model_a);
system($nginx, '-p', "$root/", '-c', "$root/conf/nginx.conf",
       '-e', $log) == 0 or BAIL_OUT("nginx did not start");
for (1 .. 100) {
    last if master_pid();
    sleep 0.05;
}
ok(master_pid(), 'nginx started');

sub request {
    my ($method, $uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 10)
        or die "connect: $!";
    $body //= '';
    print $s "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

# everything the server sends until it closes, or until $secs pass
sub read_all {
    my ($s, $secs, $got) = @_;
    $got //= '';
    my $sel = IO::Select->new($s);
    my $end = time + $secs;
    while ((my $left = $end - time) > 0) {
        last unless $sel->can_read($left);
        my $k = sysread($s, my $buf, 65536);
        last unless $k;
        $got .= $buf;
    }
    close $s;
    return $got;
}

# reads until $re matches what came so far
sub read_until {
    my ($s, $re, $secs) = @_;
    my $got = '';
    my $sel = IO::Select->new($s);
    my $end = time + $secs;
    while ($got !~ $re && (my $left = $end - time) > 0) {
        last unless $sel->can_read($left);
        my $k = sysread($s, my $buf, 65536);
        last unless $k;
        $got .= $buf;
    }
    return $got;
}

# (head, body, chunked body ended properly)
sub split_response {
    my $r = shift;
    my ($head, $raw) = split /\r\n\r\n/, $r, 2;
    $head //= '';
    $raw //= '';
    return ($head, $raw, 0) unless $head =~ /^Transfer-Encoding: chunked/mi;
    my ($body, $at) = ('', 0);
    while ((my $eol = index($raw, "\r\n", $at)) >= 0) {
        my $size = substr($raw, $at, $eol - $at);
        return ($head, $body, 0) unless $size =~ /^[0-9a-fA-F]+$/;
        my $n = hex $size;
        $at = $eol + 2;
        return ($head, $body, substr($raw, $at) eq "\r\n") if $n == 0;
        return ($head, $body, 0)
            if length($raw) < $at + $n + 2
               || substr($raw, $at + $n, 2) ne "\r\n";
        $body .= substr($raw, $at, $n);
        $at += $n + 2;
    }
    return ($head, $body, 0);
}

# the engine pid the workers of the current configuration see
sub engine_pid {
    for (1 .. 100) {
        my $r = read_all(request('GET', '/status'), 25);
        my (undef, $body) = split_response($r);
        if ($r =~ m{^HTTP/1\.1 200} && $body =~ /^\{/) {
            my $j = eval { JSON::PP::decode_json($body) };
            my $p = $j && $j->{engine}{pid};
            if ($p) {
                $engines{$p} = 1;
                return $p;
            }
        }
        sleep 0.1;
    }
    return 0;
}

sub log_count {
    my $re = shift;
    open my $fh, '<', $log or return 0;
    return scalar grep { $_ =~ $re } <$fh>;
}

sub wait_for {
    my ($cond, $secs) = @_;
    my $t0 = time;
    until ($cond->()) {
        return 0 if time - $t0 > $secs;
        sleep 0.1;
    }
    return 1;
}

my $serving = qr/kvserve: engine \d+ serving /;

my $pid_a = engine_pid();
ok($pid_a, "engine A serves ($pid_a)");
is(log_count($serving), 1, 'it loaded its model once');

my $s = request('POST', '/v1/completions',
                '{"model": "m", "prompt": "Once upon a time", "n": 64, '
                . "\"max_tokens\": $max_tokens, \"stream\": true, "
                . "\"logit_bias\": $bias}");
my $got = read_until($s, qr/data: \{/, 30);
like($got, qr/data: \{/, 'a long stream on model A started');

write_conf('b', $model_b);
kill 'HUP', master_pid();
ok(wait_for(sub { log_count(qr/gracefully shutting down/) >= 2 }, 20),
   'reload: the old workers are shutting down');

# a request for the new model: the new workers drain A and fork B
my $t0 = time;
my $r = read_all(request('POST', '/v1/completions',
                         '{"model": "b", "prompt": "Once", '
                         . '"max_tokens": 8}'), 25);
like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s,
     sprintf('a request for model B is served (%.2f s)', time - $t0));
my $pid_b = engine_pid();
ok($pid_b && $pid_b != $pid_a, "by a new engine ($pid_b)");
ok(log_count(qr/serves other models than this configuration's: DRAIN sent/),
   'a new worker sent DRAIN');
ok(log_count(qr/kvserve: engine $pid_a: DRAIN from client \d+: no longer /
             . qr/accepting; removed /),
   'engine A stopped accepting and removed its socket');
ok(log_count(qr/kvserve: engine $pid_a: lease released/),
   'engine A released the lease');
my $still = $got !~ /\[DONE\]/ && alive($pid_a);

$got = read_all($s, 120, $got);
my ($head, $body, $ended) = split_response($got);
like($body, qr/data: \[DONE\]\n\n\z/, 'the old stream ended with [DONE]');
unlike($body, qr/data: \{"error"/, '... and no error event');
ok($ended, '... and a proper end of the chunked body');
my @fin = $body =~ /"finish_reason":"length"/g;
is(scalar @fin, 64, '... every choice ran to max_tokens');
ok($still, '... engine A still ran after engine B served model B')
    or diag('the stream ended before engine B was up');

ok(wait_for(sub { log_count(qr/worker process \d+ exited/) >= 2 }, 20),
   'the old workers exited');
ok(wait_for(sub { !alive($pid_a) }, 20), 'then engine A exited');
ok(log_count(qr/kvserve: engine $pid_a: drained and no client left: /
             . qr/exiting/),
   '... and said why');
ok(alive($pid_b), 'engine B still runs');
is(lease_pid(), $pid_b, 'the lease file names engine B');
is(log_count($serving), 2, 'two model loads in all');
is(log_count(qr/started engine process/), 2, 'two engines started in all');

$r = read_all(request('POST', '/v1/completions',
                      '{"model": "b", "prompt": "Once", '
                      . '"max_tokens": 8}'), 25);
like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s, 'model B served again');
is(engine_pid(), $pid_b, '... by engine B');

done_testing();
