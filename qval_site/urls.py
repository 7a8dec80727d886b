"""URL routes of the site and the API."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularJSONAPIView

from accounts import views as account_views
from best_of_n import views as bon_views
from board import apis as board_apis
from board import boards, consistency, findings, paper_figures, results, tables
from board import views as lb
from leaderboard import apis as dataset_apis
from leaderboard import views as catalogue
from learning import views as lv
from submissions import apis as submission_apis
from submissions import views as sv
from workers import apis as worker_apis
from workers import views as wv

from . import api_docs, health, manual
from .converters import NameConverter

register_converter(NameConverter, "name")


def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, asked for by browsers and feed readers whatever the page links: the site's icon."""
    return redirect(static("favicon.svg"), permanent=True)


urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", lb.home, name="home"),
    path("favicon.ico", favicon, name="favicon"),
    path("leaderboard/", lb.board, name="leaderboard"),
    path("boards/", boards.board_list, name="boards"),
    path("boards/<str:key>/", boards.board_detail, name="board"),
    path("tables/", tables.table_index, name="tables"),
    path("tables/<str:family>/", tables.table_page, name="table"),
    path("leaderboard/aggregate/", lb.aggregate, name="aggregate"),
    path("leaderboard/critical-difference/", lb.critical_difference, name="critical-difference"),
    path("figures/paper/<str:name>/", paper_figures.paper_figure, name="paper-figure"),
    path("figures/<str:name>/", lb.figure, name="figure"),
    path("methods/<name:name>/", lb.method_detail, name="method"),
    path("environments/<str:slug>/", lb.environment_detail, name="environment"),
    path("compare/", sv.compare, name="compare"),
    path("results/<int:pk>/", results.result_page, name="result"),
    path("learned/", lv.run_list, name="learned"),
    path("learned/<int:pk>/", lv.run_detail, name="learned-run"),
    path("best-of-n/", bon_views.alignment, name="best-of-n"),
    path("best-of-n/runs/<int:pk>/", bon_views.run_detail, name="best-of-n-run"),
    path("best-of-n/runs/<int:pk>/episodes/<int:index>/", bon_views.episode_detail, name="best-of-n-episode"),
    path("how-we-score/", lb.how_we_score, name="how-we-score"),
    path("published/consistency/", consistency.consistency_page, name="published-consistency"),
    path("published/findings/", findings.findings_page, name="published-findings"),
    path("status/", wv.status, name="status"),
    path("datasets/", catalogue.dataset_list, name="datasets"),
    path("datasets/<str:key>/", catalogue.dataset_detail, name="dataset"),
    path("datasets/<str:key>/download/", catalogue.dataset_download, name="dataset-download"),
    path("datasets/<str:key>/images/<str:name>", catalogue.dataset_image, name="dataset-image"),
    path("submit/", sv.upload, name="upload"),
    path("submissions/", sv.mine, name="my-submissions"),
    path("submissions/<int:pk>/", sv.detail, name="submission"),
    path("submissions/<int:pk>/status/", sv.status, name="submission-status"),
    path("submissions/<int:pk>/card/", sv.card, name="submission-card"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/token/", account_views.token, name="api-token"),
    # Sign-up with email confirmation, email management (django-allauth).
    path("accounts/", include("allauth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/datasets/", dataset_apis.DatasetList.as_view(), name="api-datasets"),
    path("api/v1/datasets/<str:key>/download/", dataset_apis.DatasetDownload.as_view(), name="api-download"),
    path("api/v1/builds/", dataset_apis.BuildList.as_view(), name="api-builds"),
    path("api/v1/submissions/", submission_apis.SubmissionCreate.as_view(), name="api-submissions"),
    path("api/v1/submissions/<int:pk>/", submission_apis.SubmissionDetail.as_view(), name="api-submission"),
    path("api/v1/leaderboard/", board_apis.Leaderboard.as_view(), name="api-leaderboard"),
    path("api/v1/leaderboard/aggregate/", board_apis.LeaderboardAggregate.as_view(), name="api-aggregate"),
    path("api/v1/leaderboard/critical-difference/", board_apis.LeaderboardCriticalDifference.as_view(),
         name="api-critical-difference"),
    path("api/v1/figures/<str:name>/", board_apis.FigureData.as_view(), name="api-figure"),
    path("api/v1/compare/", submission_apis.Compare.as_view(), name="api-compare"),
    path("api/v1/published/table6/", board_apis.PublishedTable6.as_view(), name="api-table6"),
    path("api/v1/status/", worker_apis.Status.as_view(), name="api-status"),
    path("api/v1/workers/heartbeat", worker_apis.WorkerHeartbeatView.as_view(), name="api-worker-heartbeat"),
    path("api/v1/workers/campaign", worker_apis.CampaignView.as_view(), name="api-worker-campaign"),
    path("api/v1/jobs/<int:pk>/start", worker_apis.JobStart.as_view(), name="api-job-start"),
    path("api/v1/jobs/<int:pk>/input", worker_apis.JobInput.as_view(), name="api-job-input"),
    path("api/v1/jobs/<int:pk>/archive", worker_apis.JobArchive.as_view(), name="api-job-archive"),
    path("api/v1/jobs/<int:pk>/dataset", worker_apis.JobDataset.as_view(), name="api-job-dataset"),
    path("api/v1/jobs/<int:pk>/heartbeat", worker_apis.JobHeartbeat.as_view(), name="api-job-heartbeat"),
    path("api/v1/jobs/<int:pk>/result", worker_apis.JobResult.as_view(), name="api-job-result"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),  # YAML, or JSON by the Accept header
    path("api/v1/schema.json", SpectacularJSONAPIView.as_view(), name="api-schema-json"),
    path("api/docs/", api_docs.docs, name="api-docs"),
    path("docs/", manual.manual, name="docs"),
    path("docs/<str:slug>/", manual.manual, name="docs-page"),
]
