# Test::Nginx::Util -- kvserve's stand-in for openresty's Test::Nginx (used
# only when the real one is not installed). This file owns the nginx side:
# the preamble settings, $TEST_NGINX_* expansion, the server root and the
# generated nginx.conf, starting and stopping nginx, and reading error.log.
# Test::Nginx::Socket owns the requests, the checks and the per-block flow.
package Test::Nginx::Util;

use strict;
use warnings;

use parent 'Exporter';

use File::Path qw(make_path remove_tree);
use File::Spec ();
use IO::Socket::INET ();
use POSIX qw(SIGQUIT SIGKILL);
use Test::More ();
use Time::HiRes qw(sleep time);

# Preamble functions, re-exported by Test::Nginx::Socket.
our @EXPORT = qw(
    add_block_preprocessor bail_out check_accum_error_log env_to_nginx
    html_dir log_level master_off master_on master_process_enabled
    no_long_string no_root_location no_shuffle repeat_each server_name
    server_port server_port_for_client server_root timeout workers
    worker_connections
);

# Used by Test::Nginx::Socket only.
our @EXPORT_OK = qw(
    block_preprocessors error_log_lines expand_env parse_time
    reset_error_log_pos reset_rand_ports setup_server_root start_nginx
    stop_nginx write_config_file write_user_files
);

our $NginxBinary         = $ENV{TEST_NGINX_BINARY} || 'nginx';
our $ServerAddr          = '127.0.0.1';
our $ServerName          = 'localhost';
our $ServerPort          = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
our $ServerPortForClient = $ENV{TEST_NGINX_CLIENT_PORT} || $ServerPort;
our $RepeatEach          = 1;
our $Workers             = 1;
our $WorkerConnections   = 64;
our $LogLevel            = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $MasterProcess       = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $NoShuffle           = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $NoRootLocation      = 0;
our $NoLongString        = 0;
our $Timeout             = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $Sleep               = $ENV{TEST_NGINX_SLEEP} || 0.015;
our $CheckAccumErrLog    = $ENV{TEST_NGINX_CHECK_ACCUM_ERR_LOG};
our $LoadModules         = $ENV{TEST_NGINX_LOAD_MODULES} // '';
our @EnvToNginx;

our $ServRoot   = $ENV{TEST_NGINX_SERVROOT} || File::Spec->rel2abs('t/servroot');
our $LogDir     = "$ServRoot/logs";
our $ErrLogFile = "$LogDir/error.log";
our $AccLogFile = "$LogDir/access.log";
our $PidFile    = "$LogDir/nginx.pid";
our $HtmlDir    = "$ServRoot/html";
our $ConfDir    = "$ServRoot/conf";
our $ConfFile   = "$ConfDir/nginx.conf";

$ENV{TEST_NGINX_SERVER_ROOT} = $ServRoot;

my @BlockPreprocessors;
my %RandPorts;        # $TEST_NGINX_RAND_PORT_<n> => port, for the current block
my $ErrLogPos = 0;    # where the next error_log_lines() starts reading
my $NginxV;           # cached `nginx -V` output

# ---- preamble settings -------------------------------------------------

# Each getter/setter below returns the current value when called bare.
sub repeat_each        { $RepeatEach        = shift if @_; $RepeatEach }
sub workers            { $Workers           = shift if @_; $Workers }
sub worker_connections { $WorkerConnections = shift if @_; $WorkerConnections }
sub log_level          { $LogLevel          = shift if @_; $LogLevel }
sub timeout            { $Timeout           = shift if @_; $Timeout }
sub server_name        { $ServerName        = shift if @_; $ServerName }
sub server_port        { $ServerPort        = shift if @_; $ServerPort }
sub server_port_for_client { $ServerPortForClient = shift if @_; $ServerPortForClient }

sub master_on  { $MasterProcess = 'on' }
sub master_off { $MasterProcess = 'off' }

sub master_process_enabled {
    $MasterProcess = $_[0] ? 'on' : 'off' if @_;
    return $MasterProcess;
}

sub no_shuffle            { $NoShuffle        = 1 }
sub no_root_location      { $NoRootLocation   = 1 }
sub no_long_string        { $NoLongString     = 1 }
sub check_accum_error_log { $CheckAccumErrLog = 1 }

sub server_root { $ServRoot }
sub html_dir    { $HtmlDir }

sub env_to_nginx {
    for my $name (@_) {
        die "env_to_nginx: bad argument value: $name\n"
            if $name !~ /^[A-Za-z_]/ || $name =~ /\n/;
        push @EnvToNginx, $name;
    }
}

# Preprocessors added last run first, as in Test::Nginx.
sub add_block_preprocessor { unshift @BlockPreprocessors, shift }
sub block_preprocessors    { @BlockPreprocessors }

sub bail_out { Test::More::BAIL_OUT(join '', @_) }

# ---- values in sections --------------------------------------------------

# "500ms" -> 0.5, "2s" -> 2, "2" -> 2; undef stays undef.
sub parse_time {
    my $t = shift;
    return undef unless defined $t;
    return $1 / 1000 if $t =~ /^\s*([\d.]+)\s*ms\s*$/;
    return $1        if $t =~ /^\s*([\d.]+)\s*s?\s*$/;
    return $t;
}

sub reset_rand_ports { %RandPorts = () }

# Replace $TEST_NGINX_FOO from %ENV; $TEST_NGINX_RAND_PORT_<n> gets a free
# port, the same one for the whole block. Refs and undef pass through.
sub expand_env {
    my ($text, $name) = @_;
    return $text if !defined $text || ref $text;
    $text =~ s/\$(TEST_NGINX_[_A-Z0-9]+)/env_value($1, $name)/ge;
    return $text;
}

sub env_value {
    my ($var, $name) = @_;
    if ($var =~ /^TEST_NGINX_RAND_PORT_\d+$/) {
        $RandPorts{$var} = free_port($name) unless defined $RandPorts{$var};
        return $RandPorts{$var};
    }
    bail_out("$name - No environment $var defined.\n") unless defined $ENV{$var};
    return $ENV{$var};
}

sub free_port {
    my $name = shift;
    my %used = ($ServerPort => 1, map { $_ => 1 } values %RandPorts);
    for (1 .. 1000) {
        my $port = 1988 + int rand 63547;
        next if $used{$port};
        my $sock = IO::Socket::INET->new(
            LocalAddr => $ServerAddr, LocalPort => $port, Proto => 'tcp',
            Listen    => 1,           ReuseAddr => 1,
        ) or next;
        close $sock;
        return $port;
    }
    bail_out("$name - Cannot find an available listening port number.\n");
}

# ---- server root -----------------------------------------------------------

# Wipe and recreate <servroot>/{conf,logs,html}. Only the directories we own
# are removed, so a mistaken TEST_NGINX_SERVROOT does not lose real data.
sub setup_server_root {
    if (-d $ServRoot) {
        remove_tree($ConfDir, $LogDir, $HtmlDir, "$ServRoot/cache",
                    glob("$ServRoot/*_temp"), glob("$ServRoot/*_cache"));
        rmdir $ServRoot or bail_out("Can't remove $ServRoot (not empty?): $!");
    }
    make_path($ConfDir, $LogDir, $HtmlDir);
    write_file("$HtmlDir/index.html",
        '<html><head><title>It works!</title></head><body>It works!</body></html>');
}

sub write_file {
    my ($path, $data) = @_;
    open my $out, '>', $path or bail_out("Can't open $path for writing: $!");
    binmode $out;
    print $out $data;
    close $out;
}

# --- user_files: ">>> name [touch-date]" headers, each followed by content.
sub write_user_files {
    my $block = shift;
    my $name  = $block->name;
    my $files = $block->user_files or return;
    $files = parse_user_files($files) unless ref $files;
    bail_out("$name - user_files must be a string or an ARRAY") if ref $files ne 'ARRAY';

    for my $file (@$files) {
        my ($fname, $body, $date) = @$file;
        my $path = $fname =~ m{^/} ? $fname : "$HtmlDir/$fname";
        make_path($1) if $path =~ m{(.*)/} && !-d $1;
        write_file($path, expand_env($body // '', $name));
        next unless $date;
        system("TZ=GMT touch -t '$date' '$path'") == 0
            or bail_out("$name - Failed to set the mtime of $path to $date");
    }
}

sub parse_user_files {
    my $text = shift;
    my @files;
    for my $line (split /^/, $text) {
        if ($line =~ /^>>> (\S+)(?:\s+(.+?))?\s*$/) {
            push @files, [$1, '', $2];
        } elsif (@files) {
            $files[-1][1] .= $line;
        }
    }
    return \@files;
}

# ---- nginx.conf --------------------------------------------------------------

sub write_config_file {
    my ($block, $config) = @_;
    my $name = $block->name;

    my $main_config = join "\n", (map { "load_module $_;" } split ' ', $LoadModules),
                                 $block->main_config // '';
    my $server_name = $block->server_name // $ServerName;
    $server_name =~ s/(['\\])/\\$1/g;
    my $log_level = $block->log_level || $LogLevel;
    my $env_lines = join '', map { /\s/ ? "env '$_';\n" : "env $_;\n" }
                                 qw(LD_PRELOAD LD_LIBRARY_PATH), @EnvToNginx;
    my $http_config = expand_env($block->http_config // '', $name);
    my $root_location = $NoRootLocation ? '' : <<"EOC";
        location / {
            root $HtmlDir;
            index index.html index.htm;
        }
EOC

    write_file($ConfFile, <<"EOC");
worker_processes  $Workers;
daemon on;
master_process $MasterProcess;
error_log $ErrLogFile $log_level;
pid       $PidFile;
$env_lines
${\ expand_env($main_config, $name)}

http {
    access_log $AccLogFile;
${\ temp_path_directives($http_config)}
    default_type text/plain;
    keepalive_timeout  68000ms;

$http_config

    server {
        listen          $ServerAddr:$ServerPort;
        server_name     '$server_name';
        client_max_body_size 30M;

        # Begin test case config...
${\ ($config // '')}
        # End test case config.

$root_location    }
}

${\ expand_env($block->post_main_config // '', $name)}

events {
    accept_mutex off;
    worker_connections  $WorkerConnections;
}
${\ ($> == 0 ? 'user root;' : '')}
EOC
}

# Debian's compiled-in temp paths lie outside the server root: override the
# ones this binary has and the test's http_config does not set itself.
sub temp_path_directives {
    my $http_config = shift;
    $NginxV //= `$NginxBinary -V 2>&1`;
    my @lines;
    for my $kind (qw(client_body proxy fastcgi scgi uwsgi)) {
        next if $NginxV =~ /--without-http_${kind}_module/;
        next if $http_config =~ /\b${kind}_temp_path\b/;
        push @lines, "    ${kind}_temp_path $ServRoot/${kind}_temp;";
    }
    return join "\n", @lines;
}

# ---- nginx process -------------------------------------------------------------

# Run nginx (it daemonises once its sockets are bound). Returns the wait
# status of the command; on success it also waits for the pid file. Retries
# while the port is still held by an nginx that is shutting down.
sub start_nginx {
    my $block = shift;
    bail_out($block->name . " - Cannot find the nginx executable \"$NginxBinary\"")
        unless can_run($NginxBinary);

    my $cmd = "$NginxBinary -p $ServRoot/ -c $ConfFile -e $ErrLogFile > /dev/null";
    $cmd .= ' 2> /dev/null' if defined $block->suppress_stderr;

    my $deadline = time + 5;
    while (1) {
        system($cmd);
        my $status = $?;
        if ($status == 0) {
            wait_until(sub { -s $PidFile }, $Timeout)
                or warn $block->name, " - nginx started but wrote no pid file\n";
            return 0;
        }
        return $status if time > $deadline || !error_log_has(qr/Address already in use/);
        sleep 0.2;
    }
}

sub can_run {
    my $cmd = shift;
    return -f $cmd && -x _ if $cmd =~ m{/};
    return grep { -f "$_/$cmd" && -x _ } split /:/, $ENV{PATH} // '';
}

# QUIT the nginx named by the pid file and wait until it has gone: the pid
# file vanishes and the port closes. (A daemon that exited can linger as a
# zombie of PID 1, so kill 0 is no proof of life.) KILL it after the timeout.
sub stop_nginx {
    my $name = shift // 'cleanup';
    my $pid = pid_from_file() or return;
    if (!kill SIGQUIT, $pid) {
        unlink $PidFile;    # stale: that process is gone
        return;
    }
    if (!wait_until(sub { !-e $PidFile }, $Timeout)) {
        warn "$name - timeout when waiting for nginx $pid to exit; killing it\n";
        kill(SIGKILL, -$pid) or kill(SIGKILL, $pid);
        unlink $PidFile;
    }
    wait_until(sub { !port_in_use() }, $Timeout);
}

sub pid_from_file {
    open my $in, '<', $PidFile or return undef;
    my $pid = <$in> // '';
    close $in;
    return $pid =~ /^(\d+)/ ? $1 : undef;
}

sub port_in_use {
    my $sock = IO::Socket::INET->new(
        PeerAddr => $ServerAddr, PeerPort => $ServerPort, Proto => 'tcp', Timeout => 0.2,
    ) or return 0;
    close $sock;
    return 1;
}

sub wait_until {
    my ($cond, $secs) = @_;
    my $deadline = time + $secs;
    until ($cond->()) {
        return 0 if time > $deadline;
        sleep 0.01;
    }
    return 1;
}

# ---- error.log -----------------------------------------------------------------

sub reset_error_log_pos { $ErrLogPos = 0 }

# The error.log lines written since the last call (all of them under
# check_accum_error_log). Sleeps first so that log-phase lines, written
# after nginx closed the connection, make it in.
sub error_log_lines {
    sleep $Sleep * 3;
    open my $in, '<', $ErrLogFile or return [];
    seek $in, $ErrLogPos, 0 unless $CheckAccumErrLog;
    my @lines = <$in>;
    $ErrLogPos = tell $in unless $CheckAccumErrLog;
    close $in;
    return \@lines;
}

sub error_log_has {
    my $re = shift;
    open my $in, '<', $ErrLogFile or return 0;
    while (<$in>) {
        return 1 if $_ =~ $re;
    }
    return 0;
}

END {
    local $?;    # keep the test's exit status
    stop_nginx('END') unless $ENV{TEST_NGINX_NO_CLEAN};
}

1;
