# GET /health (issue 22 point 4), on one nginx of our own with
# worker_processes 1 (so that every answer is the same worker's view):
#
# 1. nginx -t refuses kvserve_health twice in a location and outside one;
# 2. with no model configured, a kvserve_health location answers 200
#    {"status":"ok"};
# 3. reloaded with a model: 200 once its engine is ready, on the
#    kvserve_health location and on /v1/health of the kvserve location;
#    HEAD has the status and no body; POST is a 405 naming GET and HEAD;
# 4. the engine killed until the respawn backoff holds it down: 503, an
#    OpenAI error object naming the model and why, Retry-After; then 200
#    again once a new engine serves.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use Time::HiRes qw(sleep time);

my $t = Kvserve::Live->new('032-health');
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

my $server = <<'EOS';
        location /v1/ { kvserve; }
        location = /health { kvserve_health; }
        location = /status { kvserve_status; }
EOS

# the last engine the log says was started for $model
sub engine_of {
    my ($m) = @_;
    open my $fh, '<', $t->log_path or return 0;
    my $pid = 0;
    while (my $l = <$fh>) {
        $pid = $1 if $l =~ /started engine process (\d+) for model "\Q$m\E"/;
    }
    return $pid;
}

sub get {
    my ($method, $uri) = @_;
    return $t->read_all($t->request($method, $uri), 25);
}

# ---- 1. nginx -t ------------------------------------------------------------

{
    my ($failed, $out) = $t->nginx_t(
        "server { location /h { kvserve_health; kvserve_health; } }");
    ok($failed, 'nginx -t: kvserve_health twice fails');
    like($out, qr/"kvserve_health" directive is duplicate/, '... saying so');

    ($failed, $out) = $t->nginx_t("kvserve_health;");
    ok($failed, 'nginx -t: kvserve_health in the http block fails');
    like($out, qr/"kvserve_health" directive is not allowed here/,
         '... saying so');

    ($failed, $out) = $t->nginx_t("server { location /h { kvserve_health; } }");
    ok(!$failed, 'nginx -t: kvserve_health with no model passes') or diag($out);
}

# ---- 2. no model -------------------------------------------------------------

$t->write_conf('', workers => 1,
               server => "        location = /health { kvserve_health; }\n");
ok($t->start, 'nginx started with no model');

{
    my $r = get('GET', '/health');
    like($r, qr{^HTTP/1\.1 200 }, 'no model: 200');
    my (undef, $body) = $t->split_response($r);
    is($body, qq({"status":"ok"}\n), '... {"status":"ok"}');
    like($r, qr{^Content-Type: application/json\r$}mi, '... as JSON');
    like($r, qr{^Cache-Control: no-store\r$}mi, '... not to be cached');
}

# ---- 3. a model, its engine ready -------------------------------------------

$t->write_conf("    kvserve_model m $model;\n    kvserve_kv_cache 8m;\n"
               . "    kvserve_threads 1;\n    kvserve_engine_wait 1s;\n",
               workers => 1, server => $server);
kill 'HUP', $t->master_pid;

# the old configuration answers 200 too: its worker must be gone
ok($t->wait_for(sub { $t->log_count(qr/worker process \d+ exited/) >= 1 },
                20), 'reloaded with a model: the old worker exited');
ok($t->engine_pid, '... and an engine serves');
my $ok = $t->wait_for(sub { get('GET', '/health') =~ m{^HTTP/1\.1 200 } },
                      30);
ok($ok, '... and /health answers 200');

{
    my $r = get('GET', '/health');
    my (undef, $body) = $t->split_response($r);
    is($body, qq({"status":"ok"}\n), '... {"status":"ok"}');

    $r = get('GET', '/v1/health');
    like($r, qr{^HTTP/1\.1 200 }, 'a kvserve location answers /v1/health');
    (undef, $body) = $t->split_response($r);
    is($body, qq({"status":"ok"}\n), '... the same way');

    $r = get('HEAD', '/health');
    like($r, qr{^HTTP/1\.1 200 }, 'HEAD: 200');
    (undef, $body) = $t->split_response($r);
    is($body, '', '... and no body');

    $r = get('POST', '/health');
    like($r, qr{^HTTP/1\.1 405 }, 'POST: 405');
    like($r, qr{^Allow: GET, HEAD\r$}mi, '... allowing GET and HEAD');
    like($r, qr/"code":"method_not_allowed"/, '... as an OpenAI error');
}

# ---- 4. the engine down ------------------------------------------------------

# each young death doubles the respawn delay: 100, 200, 400, 800, 1600 ms
my $pid = engine_of('m');
$t->{engines}{$pid} = 1;
my $killed = 0;
for my $round (1 .. 5) {
    kill 'KILL', $pid;
    $killed++;
    last if $round == 5;
    my $next;
    $t->wait_for(sub { $next = engine_of('m'); $next && $next != $pid },
                 10) or last;
    $t->{engines}{$next} = 1;
    $pid = $next;
}
is($killed, 5, 'the engine killed 5 times');

{
    my $r;
    my $down = $t->wait_for(sub {
        $r = get('GET', '/health');
        $r =~ m{^HTTP/1\.1 503 };
    }, 5);
    ok($down, 'its engine down: /health answers 503') or diag($r);
    like($r, qr/"message":"Not every model is ready: m: (?:[^"\\]|\\.)*engine for model \\"m\\"(?:[^"\\]|\\.)+\."/,
         '... naming the model and why') or diag($r);
    like($r, qr/"type":"server_error"/, '... as an OpenAI error');
    like($r, qr/"code":"model_unavailable"/, '... with its code');
    like($r, qr{^Retry-After: 1\r$}mi, '... and Retry-After');
}

$ok = $t->wait_for(sub { get('GET', '/health') =~ m{^HTTP/1\.1 200 } }, 30);
ok($ok, 'a new engine serves: /health answers 200 again');

done_testing();
