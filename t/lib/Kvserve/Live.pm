# Kvserve::Live -- one nginx of our own, really running, with the kvserve
# module and worker_processes 2, for the tests of the engine process's
# life (009-engine-life.t, 011-reload-models.t).  It owns the server
# root (TEST_NGINX_SERVROOT-<name>, beside the runner's, which empties
# its own as it likes; emptied by new()), the skeleton nginx.conf (the
# API at /v1/, kvserve_status at /status, kvserve_engine_dir under the
# root, error.log at level info), a free port on 127.0.0.1, and the
# plain HTTP/1.1 client the tests talk through.  Every engine pid that
# engine_pid() saw is remembered, so that stop() (to be called from the
# test's END) kills it with nginx even when the test died half-way.
# Not a Test::Nginx runner: one nginx, started once, kept across tests.
package Kvserve::Live;

use strict;
use warnings;

use File::Path qw(make_path remove_tree);
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use Test::More ();
use Time::HiRes qw(sleep time);

# Plans skip_all (the test ends there) unless TEST_NGINX_LOAD_MODULES
# and TEST_NGINX_MODEL_DIR are set; else makes an empty server root
# named after $name with conf/, logs/, engine/ and the directories
# named in @dirs, and picks a free port.
sub new {
    my ($class, $name, @dirs) = @_;
    my $module = $ENV{TEST_NGINX_LOAD_MODULES};
    my $model_dir = $ENV{TEST_NGINX_MODEL_DIR};
    Test::More::plan(
        skip_all => 'TEST_NGINX_LOAD_MODULES and TEST_NGINX_MODEL_DIR needed')
        unless $module && $model_dir;

    my $root = ($ENV{TEST_NGINX_SERVROOT} // '/tmp/kvserve-t') . "-$name";
    remove_tree($root);
    make_path(map { "$root/$_" } 'conf', 'logs', 'engine', @dirs);

    # bound then closed: free unless someone takes it before nginx does
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $port = $s->sockport;
    close $s;

    return bless {
        nginx     => $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx',
        module    => $module,
        model_dir => $model_dir,
        root      => $root,
        port      => $port,
        engines   => {},
    }, $class;
}

sub model_dir { $_[0]{model_dir} }
sub root      { $_[0]{root} }
sub port      { $_[0]{port} }
sub log_path  { "$_[0]{root}/logs/error.log" }

# Writes nginx.conf with $http (the kvserve_model and tuning directives)
# in the http block.  Written aside and renamed, so that a reload never
# reads half a file.  %o may change: workers (2), error_level (info),
# connections (256), access_log ("access_log off;"), listen (more
# parameters of the listen directive), main (directives of the main
# context, e.g. a thread_pool) and server (the server block's locations;
# by default the API at /v1/ and kvserve_status at /status).
sub write_conf {
    my ($self, $http, %o) = @_;
    my ($root, $port) = @$self{qw(root port)};
    my $workers = $o{workers} // 2;
    my $level = $o{error_level} // 'info';
    my $conns = $o{connections} // 256;
    my $access = $o{access_log} // 'access_log off;';
    my $listen = "127.0.0.1:$port" . ($o{listen} ? " $o{listen}" : '');
    my $main = $o{main} // '';
    my $server = $o{server} // <<"EOS";
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
EOS
    open my $cf, '>', "$root/conf/nginx.conf.new" or die "conf: $!";
    print $cf <<"EOC";
load_module $self->{module};
worker_processes $workers;
daemon on;
master_process on;
error_log logs/error.log $level;
pid logs/nginx.pid;
$main
events { worker_connections $conns; }
http {
    $access
    client_body_temp_path logs/body;
    kvserve_engine_dir $root/engine;
$http
    server {
        listen $listen;
$server
    }
}
EOC
    close $cf or die "conf: $!";
    rename "$root/conf/nginx.conf.new", "$root/conf/nginx.conf"
        or die "rename: $!";
}

# Runs `nginx -t` on a configuration of its own (conf/check.conf) with
# $http in its http block and nothing else; returns whether it failed
# and what nginx said.
sub nginx_t {
    my ($self, $http) = @_;
    my $root = $self->{root};
    my $conf = "$root/conf/check.conf";
    open my $fh, '>', $conf or die "conf: $!";
    print $fh <<"EOC";
load_module $self->{module};
error_log /dev/null;
pid /dev/null;
events {}
http {
$http
}
EOC
    close $fh or die "conf: $!";
    my $out = `$self->{nginx} -t -p $root/ -c $conf 2>&1`;
    return ($? != 0, $out);
}

# Starts nginx (BAIL_OUT when it cannot) and waits up to 5 s for its pid
# file; returns the master's pid, or nothing when it never came.
sub start {
    my ($self) = @_;
    my $root = $self->{root};
    system($self->{nginx}, '-p', "$root/", '-c', "$root/conf/nginx.conf",
           '-e', $self->log_path) == 0
        or Test::More::BAIL_OUT("nginx did not start");
    for (1 .. 100) {
        last if $self->master_pid;
        sleep 0.05;
    }
    return $self->master_pid;
}

# The master's pid from logs/nginx.pid; nothing before nginx wrote it.
sub master_pid {
    my ($self) = @_;
    open my $fh, '<', "$self->{root}/logs/nginx.pid" or return;
    my $p = <$fh>;
    chomp $p if defined $p;
    return $p;
}

# The pid a lease file (engine/m-<key>.lock, one per model) names: the
# first that names one, in the files' order; nothing when none does (a
# drained engine's file is empty).  With $model, that model's file only
# (its key, the FNV-1a 64 of the name, as ngx_http_kvserve_engine.c
# makes it).
sub lease_pid {
    my ($self, $model) = @_;
    my @files = defined $model
        ? ("$self->{root}/engine/m-" . fnv1a64($model) . '.lock')
        : sort glob "$self->{root}/engine/*.lock";
    for my $f (@files) {
        open my $fh, '<', $f or next;
        my ($p) = (<$fh> // '') =~ /^(\d+) /;
        return $p if $p;
    }
    return;
}

# FNV-1a 64 of $s's bytes, as 16 hex digits, from kvs_hash.h's
# KVS_FNV1A64_INIT (1469598103934665603, as src/base writes it).
sub fnv1a64 {
    my ($s) = @_;
    require Math::BigInt;
    my $h = Math::BigInt->new('1469598103934665603');
    my $prime = Math::BigInt->from_hex('100000001b3');
    my $mod = Math::BigInt->new(2)->bpow(64);
    for my $c (unpack 'C*', $s) {
        $h->bxor($c);
        $h->bmul($prime)->bmod($mod);
    }
    my $hex = $h->as_hex;
    $hex =~ s/^0x//;
    return (sprintf '%16s', $hex) =~ tr/ /0/r;
}

# The kvserve tool (KVS_CLI, else the one beside the model directory);
# plans skip_all (the test ends there) when it is not there.
sub cli {
    my ($self) = @_;
    my $cli = $ENV{KVS_CLI} || "$self->{model_dir}/../kvserve";
    Test::More::plan(skip_all => "no kvserve tool at $cli") unless -x $cli;
    $self->{cli} = $cli;
    return $cli;
}

# Runs the kvserve tool (cli() first) with @args; a test named $what
# passes when it exits 0, else shows what it said.
sub cli_ok {
    my ($self, $what, @args) = @_;
    my $out = `'$self->{cli}' @args 2>&1`;
    Test::More::is($?, 0, $what) or Test::More::diag($out);
}

# Whether process $p exists and is not a zombie.
sub alive {
    my ($self, $p) = @_;
    return 0 unless kill 0, $p;
    my $st = `cat /proc/$p/stat 2>/dev/null`;
    return $st ne '' && $st !~ /^\d+ \(.*\) Z/;
}

# Sends "$method $uri" with $body (none by default) and
# Connection: close; returns the socket, the response unread.
sub request {
    my ($self, $method, $uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $self->{port},
                                  Proto => 'tcp', Timeout => 10)
        or die "connect: $!";
    $body //= '';
    print $s "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

# $got followed by everything the server sends on $s until it closes, or
# until $secs pass; closes $s.
sub read_all {
    my ($self, $s, $secs, $got) = @_;
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

# What $s sent until it matched $re, the server closed, or $secs passed;
# $s stays open for read_all.
sub read_until {
    my ($self, $s, $re, $secs) = @_;
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

# Splits a raw response: (head, body, whether the chunked body ended
# properly, last chunk and all).  A body that is not chunked is returned
# as it came, with 0.
sub split_response {
    my ($self, $r) = @_;
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

# The engine pid that /status shows to the workers of the current
# configuration, remembered for stop(); asks up to 100 times, 0 when no
# answer named one.
sub engine_pid {
    my ($self) = @_;
    for (1 .. 100) {
        my $r = $self->read_all($self->request('GET', '/status'), 25);
        my (undef, $body) = $self->split_response($r);
        if ($r =~ m{^HTTP/1\.1 200} && $body =~ /^\{/) {
            my $j = eval { JSON::PP::decode_json($body) };
            my $p = $j && $j->{engine}{pid};
            if ($p) {
                $self->{engines}{$p} = 1;
                return $p;
            }
        }
        sleep 0.1;
    }
    return 0;
}

# How many lines of error.log match $re.
sub log_count {
    my ($self, $re) = @_;
    open my $fh, '<', $self->log_path or return 0;
    return scalar grep { $_ =~ $re } <$fh>;
}

# How many worker processes logged that all $n hosts of $n listed are
# routable (kvserve_route logs a line when a worker's routable set
# changes).  Each worker lists the hosts on its own refresh, a second
# apart, and one whose table is still short routes as if the hosts it
# lacks were not there: a test waits for every worker before routing.
sub workers_listing {
    my ($self, $n) = @_;
    open my $fh, '<', $self->log_path or return 0;
    my %pid;
    while (<$fh>) {
        $pid{$1} = 1 if /\[notice\]\ (\d+)\#\d+:\ kvserve_route:\ upstream
                         \ "[^"]*":\ $n\ of\ $n\ listed\ hosts\ routable$/x;
    }
    return scalar keys %pid;
}

# Polls $cond every 0.1 s; 1 once it holds, 0 when $secs passed first.
sub wait_for {
    my ($self, $cond, $secs) = @_;
    my $t0 = time;
    until ($cond->()) {
        return 0 if time - $t0 > $secs;
        sleep 0.1;
    }
    return 1;
}

# Kills what was started: TERM to the master, KILL (after CONT, for one
# the test stopped) to every engine seen and the one holding the lease,
# then KILL to a master still there after 5 s.  For the test's END.
sub stop {
    my ($self) = @_;
    my $m = $self->master_pid;
    kill 'TERM', $m if $m;
    for my $p (grep { $_ } keys %{$self->{engines}}, $self->lease_pid) {
        kill 'CONT', $p;
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

1;
