# kvserve_chat_template: every template name passes `nginx -t` in http,
# server and location blocks; a name we do not know fails it at
# configuration time, nginx-style, quoting the value and listing the names,
# with the file and line; so do a duplicate and a missing value.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::NginxT;
use Test::More;

my $t = Kvserve::NginxT->new('chat-template');
my $model = $t->model;

my @names = qw(llama3 llama3.1 llama2 chatml mistral zephyr phi3 gemma);
my $names = join ', ', @names;

# Runs nginx -t with the model, $http in the http block and $server in the
# server block (which by default serves the API at /v1/); returns (exit
# status, everything nginx printed).
sub nginx_t {
    my ($http, $server) = @_;
    return $t->nginx_t("kvserve_model tiny $model;\n    $http", $server);
}

my ($status, $out);

for my $name (@names) {
    ($status, $out) = nginx_t('',
        "location /v1/ { kvserve; kvserve_chat_template $name; }");
    is($status, 0, "kvserve_chat_template $name passes nginx -t") or diag($out);
}

($status, $out) = nginx_t('kvserve_chat_template chatml;',
    'kvserve_chat_template llama2;
     location /v1/ { kvserve; }
     location /other/ { kvserve; kvserve_chat_template gemma; }');
is($status, 0, 'it is allowed in http, server and location at once')
    or diag($out);
like($out, qr/test is successful/, '... and nginx says so');

($status, $out) = nginx_t('',
    'location /v1/ { kvserve; kvserve_chat_template jinja; }');
isnt($status, 0, 'an unknown name fails nginx -t');
like($out, qr/\[emerg\] .*invalid value "jinja" in "kvserve_chat_template" directive, it must be one of \Q$names\E in \S+nginx\.conf:\d+/,
     '... quoting the value, listing the names, with the line');
like($out, qr/test failed/, '... and nginx says the test failed');

($status, $out) = nginx_t('kvserve_chat_template Llama3;');
isnt($status, 0, 'names are case-sensitive, in http too');
like($out, qr/invalid value "Llama3" in "kvserve_chat_template" directive/,
     '... naming the value');

($status, $out) = nginx_t('', 'kvserve_chat_template "llama3 ";
                                location /v1/ { kvserve; }');
isnt($status, 0, 'a name with a trailing space is not the name, in server');
like($out, qr/invalid value "llama3 " in "kvserve_chat_template"/,
     '... and the value is shown as written');

($status, $out) = nginx_t('kvserve_chat_template llama3;
                           kvserve_chat_template chatml;');
isnt($status, 0, 'the directive twice in one block fails');
like($out, qr/"kvserve_chat_template" directive is duplicate/,
     '... as a duplicate');

($status, $out) = nginx_t('kvserve_chat_template;');
isnt($status, 0, 'the directive without a value fails');
like($out, qr/invalid number of arguments in "kvserve_chat_template" directive/,
     '... saying so');

$t->done;
done_testing();
