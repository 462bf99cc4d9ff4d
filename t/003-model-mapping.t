# The model file is mapped once, in the master, before workers fork: the
# master and every worker map the same file read-only and shared; a reload
# leaves exactly one mapping in the master (the old configuration's is
# released); and the backend line is logged once per start, not once per
# worker.
use strict;
use warnings;
use File::Path qw(make_path remove_tree);
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(sleep);

my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES}
    or plan skip_all => 'TEST_NGINX_LOAD_MODULES (the module .so) is not set';
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
-f $model or plan skip_all => "no model at $model (run make all)";
-r '/proc/self/maps' or plan skip_all => 'no /proc/<pid>/maps here';

my $root = ($ENV{TEST_NGINX_SERVROOT} || 't/servroot') . '-mapping';
remove_tree($root);
make_path("$root/conf", "$root/logs");

my $port = do {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die $!;
    $s->sockport;
};

open my $fh, '>', "$root/conf/nginx.conf" or die $!;
print $fh <<"CONF";
load_module $module;
worker_processes 2;
pid logs/nginx.pid;
error_log logs/error.log notice;
events { worker_connections 64; }
http {
    access_log logs/access.log;
    client_body_temp_path logs/cb; proxy_temp_path logs/p;
    fastcgi_temp_path logs/f; uwsgi_temp_path logs/u; scgi_temp_path logs/s;
    kvserve_model tiny $model;
    server { listen 127.0.0.1:$port; location /v1/ { kvserve; } }
}
CONF
close $fh;

sub slurp { local $/; open my $f, '<', $_[0] or return ''; <$f> }

sub master_pid {
    my $pid = slurp("$root/logs/nginx.pid");
    chomp $pid;
    return $pid;
}

# live worker processes of the master (ppid == master, state not Z)
sub workers {
    my ($master) = @_;
    my @pids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $s = slurp($stat) or next;
        my ($pid, $state, $ppid) = $s =~ /^(\d+) \(.*\) (\S) (\d+)/ or next;
        push @pids, $pid if $ppid == $master && $state ne 'Z';
    }
    return @pids;
}

# the mappings of the model file in a process, as "perms" strings
sub model_maps {
    my ($pid) = @_;
    return map { (split ' ')[1] } grep { /\Q$model\E$/ } split /\n/,
        slurp("/proc/$pid/maps");
}

sub wait_for { my ($cond) = @_; for (1 .. 200) { return 1 if $cond->(); sleep 0.025 } 0 }

system($nginx, '-p', "$root/", '-c', 'conf/nginx.conf', '-e', 'logs/error.log') == 0
    or BAIL_OUT('nginx did not start: ' . slurp("$root/logs/error.log"));

my $master = master_pid();
ok(wait_for(sub { workers($master) == 2 }), 'two workers started');

my @maps = model_maps($master);
is(scalar @maps, 1, 'the master maps the model once');
is($maps[0], 'r--s', '... read-only and shared');
for my $w (workers($master)) {
    is_deeply([model_maps($w)], ['r--s'], "worker $w shares that mapping");
}

ok(wait_for(sub { slurp("$root/logs/error.log") =~ /kvserve: model "[^"]+": backend: (?:cpu|cuda)/ }),
   'the backend line is logged');
my @lines = slurp("$root/logs/error.log") =~ /kvserve: model "[^"]+": (backend: (?:cpu|cuda))/g;
is(scalar @lines, 1, '... once, not once per worker');

# reload: new workers, and the master keeps one mapping, not two
my @old = workers($master);
kill 'HUP', $master;
ok(wait_for(sub { my @w = workers($master);
                  @w == 2 && !grep { my $o = $_; grep { $_ == $o } @w } @old }),
   'a reload replaces the workers');
is(scalar(model_maps($master)), 1, 'after a reload the master maps the model once');

my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die $!;
print $c "GET /v1/models HTTP/1.0\r\n\r\n";
my $resp = do { local $/; <$c> };
like($resp, qr/^HTTP\/1\.1 200 .*"id":"tiny"/s, 'the reloaded workers serve');

kill 'QUIT', $master;
wait_for(sub { !-e "$root/logs/nginx.pid" });
remove_tree($root);
done_testing();
