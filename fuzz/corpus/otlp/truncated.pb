
À
Ì
"
telemetry.sdk.language
python
%
telemetry.sdk.name
opentelemetry
!
telemetry.sdk.version
1.45.2
=
service.instance.id&
$26a8dbb2-1ca2-4e9b-be7e-032235e52457

service.name
rag-serviceî
,
"openinference.instrumentation.dspy0.1.48½
É©DÃ$«ÿÏ&)*3¹—œ"ó©3xHÔvè"_ÎŒðy•r*Retrieve.forward09‰<à¸DíA­Rà¸DíJB
input.value3
1{"query": "What should I know about the kettle?"}J%
input.mime_type
application/jsonJj
&retrieval.documents.0.document.content@
>The Ergo 