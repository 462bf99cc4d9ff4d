# Kvserve::NginxT -- `nginx -t` with the kvserve module on a generated
# configuration, for the tests of what nginx refuses at configuration
# time (002-nginx-t.t, 004-chat-template.t).  It owns the scratch server
# root (TEST_NGINX_SERVROOT-<name>, emptied by new() and by done()) and
# the skeleton nginx.conf: the module loaded, logs and temporary paths
# under the root, and one server on 127.0.0.1:1 that nginx -t never
# binds.  Not a Test::Nginx runner: nothing is started.
package Kvserve::NginxT;

use strict;
use warnings;

use parent 'Exporter';

use File::Path qw(make_path remove_tree);
use Test::More ();

our @EXPORT_OK = qw(write_file);

# Writes $data to $path as bytes; dies when it cannot.
sub write_file {
    my ($path, $data) = @_;
    open my $fh, '>:raw', $path or die "$path: $!";
    print $fh $data;
    close $fh or die "$path: $!";
}

# Plans skip_all (the test ends there) unless TEST_NGINX_LOAD_MODULES
# names the module and TEST_NGINX_MODEL_DIR holds default.gguf; else
# makes an empty server root named after $name.
sub new {
    my ($class, $name) = @_;
    my $module = $ENV{TEST_NGINX_LOAD_MODULES} or Test::More::plan(
        skip_all => 'TEST_NGINX_LOAD_MODULES (the module .so) is not set');
    my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
    -f $model or Test::More::plan(
        skip_all => "no model at $model (run make all)");

    my $root = ($ENV{TEST_NGINX_SERVROOT} || 't/servroot') . "-$name";
    remove_tree($root);
    make_path("$root/conf", "$root/logs");

    return bless {
        nginx  => $ENV{TEST_NGINX_BINARY} || 'nginx',
        module => $module,
        model  => $model,
        root   => $root,
    }, $class;
}

sub model { $_[0]{model} }
sub root  { $_[0]{root} }

# Runs nginx -t on a configuration with $http in the http block and
# $server in the server block (by default the API at /v1/); returns
# (exit status, everything nginx printed, error.log included).
sub nginx_t {
    my ($self, $http, $server) = @_;
    my ($nginx, $root) = @$self{qw(nginx root)};
    $server //= 'location /v1/ { kvserve; }';

    write_file("$root/conf/nginx.conf", <<"CONF");
load_module $self->{module};
pid logs/nginx.pid;
error_log logs/error.log;
events { worker_connections 16; }
http {
    access_log logs/access.log;
    client_body_temp_path logs/cb; proxy_temp_path logs/p;
    fastcgi_temp_path logs/f; uwsgi_temp_path logs/u; scgi_temp_path logs/s;
    $http
    server {
        listen 127.0.0.1:1;
        $server
    }
}
CONF
    my $out = `$nginx -t -p $root/ -c conf/nginx.conf -e logs/error.log 2>&1`;
    my $status = $? >> 8;
    my $log = do { local $/; open my $fh, '<', "$root/logs/error.log"; <$fh> };
    unlink "$root/logs/error.log";
    return ($status, $out . ($log // ''));
}

# Removes the server root.
sub done {
    my ($self) = @_;
    remove_tree($self->{root});
}

1;
