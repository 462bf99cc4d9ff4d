# Kvserve::Cluster -- a redis-server of our own and several nginx
# instances (each a Kvserve::Live: its own server root, port, conf and
# engine) for the prefix-index tests (020-route-e2e.t).  It owns the
# redis-server it starts (a free port on 127.0.0.1, kept across a kill
# and a restart so that every nginx keeps its address; no persistence:
# a restart comes back empty), the directory it runs in
# (TEST_NGINX_SERVROOT-<name>-redis) and the Live instances made by
# live().  stop() (for the test's END) stops every nginx and kills the
# redis-server, by the pids they wrote, nothing else.
package Kvserve::Cluster;

use strict;
use warnings;

use File::Path qw(make_path remove_tree);
use IO::Socket::INET ();
use Test::More ();
use Time::HiRes qw(sleep time);

use Kvserve::Live;

# Plans skip_all (the test ends there) when redis-server or redis-cli is
# not installed, or when Kvserve::Live would skip; else an empty redis
# directory and a free port, nothing started.
sub new {
    my ($class, $name) = @_;
    for my $bin (qw(redis-server redis-cli)) {
        next if grep { -x "$_/$bin" } split /:/, $ENV{PATH} // '';
        Test::More::plan(skip_all => "$bin not installed (apt-get install "
                                     . "redis-server)");
    }
    Test::More::plan(
        skip_all => 'TEST_NGINX_LOAD_MODULES and TEST_NGINX_MODEL_DIR needed')
        unless $ENV{TEST_NGINX_LOAD_MODULES} && $ENV{TEST_NGINX_MODEL_DIR};

    my $dir = ($ENV{TEST_NGINX_SERVROOT} // '/tmp/kvserve-t')
              . "-$name-redis";
    remove_tree($dir);
    make_path($dir);

    return bless {
        name  => $name,
        dir   => $dir,
        rport => free_port(),
        lives => [],
    }, $class;
}

# A port nobody listened on a moment ago (bound, then closed).
sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $p = $s->sockport;
    close $s;
    return $p;
}

sub redis_port { $_[0]{rport} }
sub redis_addr { "127.0.0.1:$_[0]{rport}" }

# A new Kvserve::Live named <name>-$suffix, stopped by stop().
sub live {
    my ($self, $suffix) = @_;
    my $l = Kvserve::Live->new("$self->{name}-$suffix");
    push @{$self->{lives}}, $l;
    return $l;
}

# Starts redis-server (no RDB, no AOF) on the cluster's port and waits up
# to 5 s for its PONG; returns whether it answered.
sub redis_start {
    my ($self) = @_;
    my ($dir, $port) = @$self{qw(dir rport)};
    unlink "$dir/redis.pid";
    system('redis-server', '--port', $port, '--bind', '127.0.0.1',
           '--save', '', '--appendonly', 'no', '--daemonize', 'yes',
           '--pidfile', "$dir/redis.pid", '--logfile', "$dir/redis.log",
           '--dir', $dir) == 0 or return 0;
    for (1 .. 100) {
        return 1 if ($self->redis('PING') // '') eq 'PONG';
        sleep 0.05;
    }
    return 0;
}

# The pid redis-server wrote; nothing when it has not (or was killed).
sub redis_pid {
    my ($self) = @_;
    open my $fh, '<', "$self->{dir}/redis.pid" or return;
    my ($p) = (<$fh> // '') =~ /^(\d+)/;
    return $p;
}

# kill -9 of redis-server (a crash: no goodbye to its clients), waiting
# up to 5 s for it to be gone; returns whether it is.
sub redis_kill {
    my ($self) = @_;
    my $p = $self->redis_pid or return 1;
    kill 'KILL', $p;
    unlink "$self->{dir}/redis.pid";
    for (1 .. 100) {
        return 1 unless kill 0, $p;
        sleep 0.05;
    }
    return 0;
}

# One redis-cli command (arguments as words, no shell); in scalar context
# the first line of the answer, in list context every line.
sub redis {
    my ($self, @args) = @_;
    open my $fh, '-|', 'redis-cli', '-p', $self->{rport}, @args
        or return;
    my @lines = <$fh>;
    close $fh;
    chomp @lines;
    return wantarray ? @lines : $lines[0];
}

# Many commands (each an array ref of words) pipelined through one
# redis-cli; the answers' lines (one per command for single-line
# answers).  Words must not hold spaces or quotes.
sub redis_many {
    my ($self, @cmds) = @_;
    my $in = "$self->{dir}/cmds.txt";
    open my $fh, '>', $in or die "$in: $!";
    print $fh join(' ', @$_), "\n" for @cmds;
    close $fh or die "$in: $!";
    open my $out, '-|', "redis-cli -p $self->{rport} < $in" or return;
    my @lines = <$out>;
    close $out;
    chomp @lines;
    return @lines;
}

# Stops every nginx made by live() and kills redis-server.
sub stop {
    my ($self) = @_;
    $_->stop for @{$self->{lives}};
    $self->redis_kill;
}

1;
